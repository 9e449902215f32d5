"""`layergrad fit`: `train` trains a copy of a model with the gradient monitor on, after
`labels` has read and judged the labels and `guards` the options, outputs and data."""
