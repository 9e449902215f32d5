"""`layergrad fit`: the options and files checked (`checks`), the model loaded (`train`) and
trained with the gradient monitor on (`run`)."""
