"""The static view of a model from its config: graph, call graph, layer references, shapes.

May import core only; TensorFlow only inside functions that resolve against a loaded model."""
