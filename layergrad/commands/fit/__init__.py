"""`layergrad fit`: `train` checks the options and files (`checks`) and loads the model, `run`
reads and judges the labels and trains the copy with the gradient monitor on."""
