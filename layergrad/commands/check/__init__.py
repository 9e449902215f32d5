"""`layergrad check`, the CI gate: `check_files` runs the named checks of each file, as
`CheckOptions` asks (`verdicts`: each check's verdict; `loss_check`: the loss against the
heads), the checks that run the model over a stream of batches (`dynamic`) and the comparison
with a committed scan (`commands/diff.py`)."""
