"""`layergrad merge`: `reports` joins the reports of shards, by the rules of `stats` and, for
Jacobian norms, `jacobian`."""
