"""Reading a model file (and array files) without TensorFlow: archive, guards, audit, weights.

May import core and model (the config parser); never TensorFlow."""
