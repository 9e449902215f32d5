"""`layergrad fix`: `repair` opens the model once, checks it and runs the command, `plan`
chooses and writes a repair per finding, `build` applies them to a copy, and `evidence` reads
the data, trains the original and each copy side by side and judges them."""
