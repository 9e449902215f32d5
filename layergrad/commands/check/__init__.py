"""`layergrad check`, the CI gate: `gate` runs the named checks of each file (`steps`), the
loss check's second look at heads (`heads`), the checks that run the model over a stream of
batches (`dynamic`) and the comparison with a committed scan (`baseline`), as `options` asks."""
