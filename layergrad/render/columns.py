"""The columns of the inspect and scan tables (text tables, and the HTML pages' headers)."""

from __future__ import annotations

from layergrad.render.common import Column

RESULT_COLUMNS = (  # inspect: one row per result
    Column("from", name_like=True),
    Column("to", name_like=True),
    Column("from shape", drop=2),
    Column("to shape", drop=3),
    Column("status"),
    Column("L2", "right", drop=4),
    Column("mean |g|", "right"),
    Column("max |g|", "right", drop=5),
    Column("zeros", "right", drop=6),
    Column("non-finite", "right", drop=1),
)

SCAN_COLUMNS = (  # scan: one row per layer call
    Column("layer", name_like=True),
    Column("class", drop=3),
    Column("shape", drop=4),
    Column("status"),
    Column("L2", "right", drop=5),
    Column("mean |g|", "right"),
    Column("zeros", "right", drop=6),
    Column("log10 mean |g|", drop=2),
    Column("flags", drop=1),
)

JACOBIAN_SCAN_COLUMNS = (  # scan --measure jacobian
    Column("layer", name_like=True),
    Column("class", drop=4),
    Column("shape", drop=5),
    Column("status"),
    Column("mean |g|", "right", drop=6),
    Column("‖J‖F mean", "right"),
    Column("± s.e.", "right", drop=3),
    Column("log10 ‖J‖F", drop=2),
    Column("flags", drop=1),
)

NORM_COLUMNS = (  # inspect --measure jacobian: the norms of each pair
    Column("from", name_like=True),
    Column("to", name_like=True),
    Column("method"),
    Column("‖J‖F mean", "right"),
    Column("‖J‖F max", "right", drop=5),
    Column("± s.e.", "right", drop=1),
    Column("‖J‖2 mean", "right"),
    Column("‖J‖2 max", "right", drop=4),
    Column("iterations", "right", drop=2),
    Column("batch", drop=3),
)

WEIGHT_COLUMNS = (  # scan --wrt weights: one row per trainable variable
    Column("variable", name_like=True),
    Column("shape", drop=3),
    Column("status"),
    Column("L2", "right", drop=4),
    Column("mean |g|", "right"),
    Column("||g|| / ||w||", "right", drop=2),
    Column("flags", drop=1),
)
