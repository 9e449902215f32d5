"""`layergrad fit`: the options and files checked and the model loaded (`train`), then trained
with the gradient monitor on (`run`)."""
