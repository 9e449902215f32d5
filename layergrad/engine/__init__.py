"""The TensorFlow passes: loading, layer calls, the inspect probe, the trace, the compiled step.

May import core, model, files and data; the only stage that runs the model."""
