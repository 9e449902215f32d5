"""`layergrad fix`: `repair` checks a model, `rules` choose a repair per finding (`heads`,
`weights`, written as `plan`s), `build` applies them to a copy, and `evidence` trains both
(`training`) on what `data` read from the labels."""
