"""`layergrad fix`: `repair` opens the model once and checks it, `rules` choose a repair per
finding (`heads`, `targets`, `weights`, written as `plan`s), `build` applies them to a copy,
and `evidence` reads the data, trains the original and each copy side by side and judges them."""
