"""`layergrad fit`: `train` checks the options and files and loads the model, `run` trains the
copy with the gradient monitor on, after `labels` has read and judged the labels and `guards`
the options, outputs and data."""
