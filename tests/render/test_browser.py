"""The HTML pages in a real browser: headless Chromium from the distribution's packages.

It takes a screenshot (which must not be blank) and dumps the DOM after the page's script ran
(the sort buttons prove the inline script is allowed by the page's Content-Security-Policy;
a hostile layer name must still be text, not an element). Skipped where Chromium is absent,
unless LAYERGRAD_REQUIRE_BROWSER is set (CI sets it): then its absence is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import CUSTOM_LAYERS, keras, sample

from layergrad.cli.app import main

IMG = "<img src=x onerror=alert(1)>"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("LAYERGRAD_REQUIRE_BROWSER"):
        pytest.fail("LAYERGRAD_REQUIRE_BROWSER is set but chromium is not installed")
    pytest.skip("chromium is not installed (apt-get install chromium) to render the HTML pages")


def browse(chromium: str, page: Path, tmp_path: Path, *mode: str) -> subprocess.CompletedProcess:
    """Open `page` in a fresh profile; `mode` is --screenshot=FILE or --dump-dom."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    profile.mkdir()
    command = [chromium, *FLAGS, f"--user-data-dir={profile}", *mode, page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)


def write_page(tmp_path: Path, *args: str) -> Path:
    result = CliRunner().invoke(main, [*args, "--format", "html"], catch_exceptions=False)
    path = tmp_path / f"{args[0]}.html"
    path.write_text(result.stdout, encoding="utf-8")
    return path


def test_scan_page_renders_to_a_non_blank_screenshot(chromium, tmp_path):
    from PIL import Image

    page = write_page(tmp_path, "scan", sample("cause_round.keras"), "--import", CUSTOM_LAYERS)
    shot = tmp_path / "scan.png"
    done = browse(chromium, page, tmp_path, f"--screenshot={shot}", "--window-size=1200,900")
    assert shot.exists(), done.stderr[-2000:]
    with Image.open(shot) as image:
        assert image.size == (1200, 900)
        rgb = image.convert("RGB")
        colours = rgb.getcolors(1 << 24)
        assert colours is not None and len(colours) > 50  # text, badges, bars: not one flat fill
        # Some of the page's own colours: the blocked verdict banner and the chart's bars.
        pixels = {c for _, c in colours}
        assert (255, 235, 233) in pixels  # .verdict.bad background #ffebe9
        assert any(
            abs(r - 0x8F) < 4 and abs(g - 0xA7) < 4 and abs(b - 0xBF) < 4 for r, g, b in pixels
        )


def test_script_runs_and_a_hostile_name_stays_text_in_the_browser(chromium, tmp_path):
    x = keras.Input((3,), name="x")
    model = keras.Model(x, keras.layers.Dense(2, name=IMG)(x))
    model.save(tmp_path / "hostile.keras")
    page = write_page(tmp_path, "scan", str(tmp_path / "hostile.keras"))
    done = browse(chromium, page, tmp_path, "--dump-dom")
    dom = done.stdout
    assert "</html>" in dom, done.stderr[-2000:]
    assert re.search(r"<th[^>]*><button[^>]*>layer</button></th>", dom)  # the sort script ran
    assert not re.search(r"<img\b", dom)
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom
