"""Data for the passes: the probe batch, data sources, and statistics that add up over batches.

May import core, model and files; TensorFlow (tf.data, accumulators) through core.keras_backend."""
