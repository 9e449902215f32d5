"""Regenerate the figures of docs/reports.md, from the bundled sample models.

    python docs/make_figures.py

Each figure is exactly what the command beside it writes (same probe seed, same chart):

    layergrad scan sample_models/cause_float16.keras --plot docs/gradient_flow.png
    layergrad inspect sample_models/residual.keras --from stem --to head --to side \\
        --plot docs/unit_sensitivity.png

PNG files are written without a date or version, so an unchanged chart gives the same bytes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from layergrad.commands.api import inspect_model, scan_model  # noqa: E402
from layergrad.render import chart_files, plot  # noqa: E402


def main() -> None:
    os.chdir(ROOT)  # the charts show the model path as given: keep it relative
    out = Path("docs")
    scan = scan_model("sample_models/cause_float16.keras")
    chart_files.save_figure(plot.scan_figure(scan), out / "gradient_flow.png")
    units = inspect_model("sample_models/residual.keras", "stem", ["head", "side"])
    chart_files.save_figure(plot.inspect_figure(units), out / "unit_sensitivity.png")
    for name in ("gradient_flow.png", "unit_sensitivity.png"):
        print(f"wrote {out / name}")


if __name__ == "__main__":
    main()
