"""Data for the passes: the probe batch, data sources, and statistics that add up over batches.

May import core, model and files; the streaming modules and `stats/` import TensorFlow at their top
(`core/tf_runtime.py`), the checks made before it loads never do."""
