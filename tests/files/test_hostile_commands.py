"""Hostile inputs on the newer surfaces: `--data`, baselines and scan JSON, outputs, options,
renderers. One test per class of attack, each command in a measured process of its own (exit
code, one line, time and peak memory bounded), as the model-file tests do: a fresh one where
what is measured is a refusal before TensorFlow, a whole process's memory or the one line of a
process that imported TensorFlow itself (`refused_late`); a child of a process that has
imported TensorFlow already for the other commands that run a model (`warm`).

Independent truths: byte digests of every file that must stay untouched, `xml.etree` parsing
the JUnit report, the characters of the output itself, PIL decoding the images, and the
process's own peak memory against the estimate.
"""

from __future__ import annotations

import json
import os
import struct
import xml.etree.ElementTree as ET
import zipfile
import zlib
from pathlib import Path

import hostile as H
import numpy as np
import pytest
from helpers import keras, scan_json, scan_row
from hostile import INSPECT, bounded, measure, refused

pytestmark = pytest.mark.slow  # a fresh process per command: seconds each
layers = keras.layers
TF_BOUND_MB = 1500  # a run that loads TensorFlow and a small model
# the same, for a `warm` child: its peak leaves out the ~300 MB of TensorFlow's own pages that a
# fresh process touches importing it (a small scan: 304 MB warm, 609 MB fresh)
WARM_BOUND_MB = TF_BOUND_MB - 300


def warm(args: list[str]) -> H.Measured:
    """`measure`, in a child of a process that has already imported TensorFlow."""
    return measure(args, H.TIMEOUT, warm=True)


@pytest.fixture(scope="module")
def image_model(root: Path) -> Path:
    """(8, 8, 3) images -> conv -> pool -> head."""
    x = keras.Input((8, 8, 3), name="image")
    h = layers.Conv2D(2, 3, name="conv")(x)
    h = layers.GlobalAveragePooling2D(name="pool")(h)
    path = root / "image.keras"
    keras.Model(x, layers.Dense(2, name="head")(h)).save(path)
    return path


def refused_late(args: list[str], *phrases: str) -> H.Measured:
    """`refused`, for a refusal that needs the model loaded (TensorFlow's memory)."""
    m = measure(args, H.TIMEOUT)
    assert m.returncode == 2, (args, m.stdout[-500:], m.stderr[-500:])
    assert m.stderr.startswith("error: ") and m.stderr.count("\n") == 1, m.stderr
    for phrase in phrases:
        assert phrase in m.stderr, (phrase, m.stderr)
    bounded(m, TF_BOUND_MB)
    return m


def _png(path: Path, pixels: np.ndarray) -> Path:
    from PIL import Image

    Image.fromarray(pixels).save(path)
    return path


# 1: special files everywhere --------------------------------------------------------------------


def test_special_files_are_refused_wherever_a_command_reads(
    root: Path, good: str, image_model: Path
) -> None:
    folder = root / "fifo_images"
    folder.mkdir()
    _png(folder / "a.png", np.zeros((8, 8, 3), np.uint8))
    os.mkfifo(folder / "b.png")
    zero_folder = root / "zero_images"
    zero_folder.mkdir()
    (zero_folder / "z.png").symlink_to("/dev/zero")
    fifo_json = root / "fifo.json"
    os.mkfifo(fifo_json)
    fifo_npz = root / "fifo.npz"
    os.mkfifo(fifo_npz)
    fifo_py = root / "fifo_data.py"
    os.mkfifo(fifo_py)
    img = ["inspect", str(image_model), "--from", "conv", "--to", "head"]
    refused([*img, "--data", str(folder)], "b.png is a FIFO (named pipe), not a regular file")
    refused([*img, "--data", str(zero_folder)], "z.png is a character device")
    refused(["diff", str(fifo_json), good], "fifo.json is a FIFO")
    refused(["check", good, "--baseline", str(fifo_json)], "fifo.json is a FIFO")
    refused(["inspect", good, *INSPECT, "--data", str(fifo_npz)], "is a FIFO")
    refused(["inspect", good, *INSPECT, "--data", f"{fifo_py}:batches"], "is a FIFO")
    late = measure(["inspect", good, *INSPECT, "--import", str(fifo_py)], H.TIMEOUT)
    assert late.returncode == 2 and "--import" in late.stderr and "is a FIFO" in late.stderr
    bounded(late, TF_BOUND_MB)
    gate = measure(["check", str(image_model), "--data", str(folder)], H.TIMEOUT)
    assert gate.returncode in (1, 2) and "b.png is a FIFO" in gate.stdout + gate.stderr
    bounded(gate, TF_BOUND_MB)


# 2: nothing a user owns is overwritten ----------------------------------------------------------


def test_outputs_never_replace_an_input_or_a_file_layergrad_did_not_write(
    root: Path, good: str, image_model: Path
) -> None:
    page = root / "index.html"
    page.write_text("<html><body>my page</body></html>\n")
    before = H.digest(page)
    refused(["check", "--static-only", good, "--junit", str(page)],
            "is not a JUnit report written by layergrad", "--force")  # fmt: skip
    assert H.digest(page) == before
    forced = measure(["check", "--static-only", good, "--junit", str(page), "--force"])
    assert forced.returncode == 0 and ET.parse(page).getroot().get("name") == "layergrad.check"
    again = measure(["check", "--static-only", good, "--junit", str(page)])  # ours now
    assert again.returncode == 0 and "(replaced it)" in again.stderr
    folder = root / "data_images"
    folder.mkdir()
    logo = _png(folder / "logo.png", np.full((8, 8, 3), 7, np.uint8))
    kept = H.digest(logo)
    img = ["scan", str(image_model), "--data", str(folder)]
    refused([*img, "--plot", str(logo)], "a folder this run reads")
    refused([*img, "--plot", str(folder / "new.png")], "inside", "a folder this run reads")
    assert H.digest(logo) == kept and sorted(os.listdir(folder)) == ["logo.png"]
    data = root / "x.npy"
    np.save(data, np.ones((4, 5), "float32"))
    link = root / "chart.png"
    link.symlink_to(data)
    refused(["scan", good, "--data", str(data), "--plot", str(link)], "which this run reads")
    baseline = scan_json(root / "baseline.json", [scan_row("dense")])
    refused(["check", good, "--baseline", str(baseline), "--junit", str(baseline)],
            "which this run reads")  # fmt: skip
    notes = root / "notes.svg"
    notes.write_text("<?xml version='1.0'?><notes>mine</notes>\n")
    refused(["scan", good, "--plot", str(notes)], "is not a chart")
    assert "mine" in notes.read_text()


# 3: names are data in every format --------------------------------------------------------------

EVIL = (
    "evil\x1b]8;;https:\\\\x\x07click\x1b]8;;\x07\u202egnp.exe\x1b[2J\x1b]0;title\x07"
    "\n# Heading ``` ![img](x.png)\x0c\u200b"
)


def _hidden_characters(text: str) -> list[str]:
    import unicodedata

    return [c for c in text if c not in "\n" and unicodedata.category(c) in ("Cc", "Cf", "Cs")]


def test_names_are_escaped_in_every_text_format(root: Path) -> None:
    model = keras.Sequential(
        [keras.Input((5,)), layers.Dense(4, name=EVIL), layers.Dense(2, name="dense_1")]
    )
    path = root / "evil\x1b[31m\u202e.keras"
    model.save(path)
    shown = {}
    for fmt in ("table", "markdown", "html"):
        m = warm(["scan", str(path), "--format", fmt])
        assert m.returncode == 0, m.stderr
        bounded(m, WARM_BOUND_MB)
        assert not _hidden_characters(m.stdout), (fmt, m.stdout[:400])
        assert "\\x1b]8;;" in m.stdout and "\\u202e" in m.stdout  # shown, not acted on
        shown[fmt] = m.stdout
    md = shown["markdown"]
    assert not [ln for ln in md.splitlines() if ln.startswith("# ")]  # no heading broke out
    html = shown["html"]
    assert "base-uri 'none'" in html and "form-action 'none'" in html
    report = root / "evil.xml"
    gate = warm(["check", str(path), "--junit", str(report)])
    bounded(gate, WARM_BOUND_MB)
    suite = ET.parse(report).getroot()  # well-formed: CI keeps every file's result
    assert all("\\x1b[31m" in case.get("classname", "") for case in suite)
    assert not _hidden_characters(gate.stdout + gate.stderr)


# 4: every option is bounded ----------------------------------------------------------------------


def _huge_png(path: Path, width: int, height: int) -> Path:
    """A PNG whose header declares ``width`` x ``height`` (a few bytes of data after it)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    body = struct.pack(">I", len(ihdr)) + chunk + struct.pack(">I", zlib.crc32(chunk))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + body + b"\0" * 64)
    return path


def test_every_option_has_an_upper_bound(root: Path, good: str, image_model: Path) -> None:
    data = root / "rows.npy"
    np.save(data, np.ones((16, 5), "float32"))
    cases = [
        (["inspect", good, *INSPECT, "--measure", "jacobian", "--probes", "1000000000"],
         "--probes must be at most 4096"),
        (["scan", good, "--data", str(data), "--cpu-replicas", "200"], "200 is not in the range"),
        (["scan", good, "--data", str(data), "--limit", str(10**23)], "is not in the range"),
        (["scan", good, "--batch-size", str(10**9)], "is not in the range"),
        (["fix", good, "--data", str(data), "--steps", str(2**63)], "is not in the range"),
        (["fix", good, "--data", str(data), "--seed", "-1"], "is not in the range"),
    ]  # fmt: skip
    for args, phrase in cases:
        m = measure(args, H.TIMEOUT)
        assert m.returncode == 2 and phrase in m.stderr, (args, m.stderr[-300:])
        bounded(m, TF_BOUND_MB)
    folder = root / "huge_images"
    folder.mkdir()
    _huge_png(folder / "bomb.png", 40_000, 40_000)
    m = refused(["inspect", str(image_model), "--from", "conv", "--to", "head", "--data",
                 str(folder)], "bomb.png declares 40,000 x 40,000 pixels")  # fmt: skip
    assert m.peak_mb < H.BOUND_MB  # refused from the header, nothing decoded
    wide = root / "wide.keras"
    keras.Sequential([keras.Input((4096,)), layers.Dense(2, name="dense"),
                      layers.Dense(2, name="dense_1")]).save(wide)  # fmt: skip
    refused(["scan", str(wide), "--batch-size", "1000000"], "--max-memory")


@pytest.mark.parametrize("command", [["inspect", "--from", "dense", "--to", "dense_1"], ["scan"]])
def test_memory_estimate_is_never_below_the_measured_peak(root: Path, command: list[str]) -> None:
    """The probe's own memory (peak at a big batch minus the peak at batch 1) stays under the
    estimate, for a model whose widest layer dominates and a huge --batch-size."""
    from layergrad.files.file_info import read_file_info
    from layergrad.model.memory_estimate import estimate

    path = root / "deep.keras"
    if not path.exists():
        keras.Sequential([keras.Input((16,)), layers.Dense(2048, name="dense"),
                          layers.Dense(2, name="dense_1")]).save(path)  # fmt: skip
    args = [command[0], str(path), *command[1:], "--batch-size"]
    small = measure([*args, "1"], 300)
    rows = 8192
    big = measure([*args, str(rows)], 300)
    assert small.returncode == big.returncode == 0, big.stderr[-300:]
    probe_mb = big.peak_mb - small.peak_mb
    estimated_mb = estimate(read_file_info(path, read_weights=False), rows).total / 2**20
    assert probe_mb > 100  # the batch really costs memory
    assert estimated_mb >= probe_mb, (estimated_mb, probe_mb)


# 5: wrong data is refused, never silently used ---------------------------------------------------


def _npz_declaring(path: Path, declared: tuple[int, ...], rows: np.ndarray) -> Path:
    """An uncompressed `.npz` whose member `x` declares ``declared`` but stores ``rows``."""
    header = H._npy_header(np.dtype("<f4"), declared)
    return H.write_zip(path, [H.stored("x.npy", header + rows.astype("<f4").tobytes()),
                              H.stored("y.npy", H._npy_header(np.dtype("<f4"), (1,)) +
                                       b"\0" * 4)])  # fmt: skip


def test_wrong_data_is_refused_through_data_as_through_input(root: Path, good: str) -> None:
    forged = _npz_declaring(root / "forged.npz", (1000, 5), np.ones((10, 5)))
    ids_model = root / "ids.keras"
    tokens = keras.Input((3,), dtype="int32", name="ids")
    embedded = layers.Embedding(10, 4, name="dense")(tokens)
    keras.Model(tokens, layers.Dense(2, name="dense_1")(embedded)).save(ids_model)
    ids = root / "ids.npy"
    np.save(ids, np.full((4, 3), 2**32 + 1, "int64"))  # wraps to 1 in int32
    big = root / "big.npy"
    np.save(big, np.full((4, 5), 1e300))
    for option in ("--data", "--input"):
        refused(["inspect", str(good), *INSPECT, option, str(forged)],
                "declares shape (1000, 5)", "holds 200 B")  # fmt: skip
        for model, path, phrase in ((ids_model, ids, "outside int32"),
                                    (good, big, "overflows float32")):  # fmt: skip
            m = warm(["inspect", str(model), *INSPECT, option, str(path)])
            assert m.returncode == 2 and phrase in m.stderr and m.stderr.count("\n") == 1, (
                option, m.stderr[-300:])  # fmt: skip
            bounded(m, WARM_BOUND_MB)


# 6: exit 2 means the user's mistake, in check too -----------------------------------------------


def test_usage_errors_of_check_exit_2(root: Path, good: str) -> None:
    m = measure(["check", good, "--seed", "-1"])  # click's usage error: exit 2, before any work
    assert m.returncode == 2 and "'--seed': -1 is not in the range" in m.stderr
    bounded(m)
    seeded = scan_json(root / "seed_minus_one.json", [scan_row("dense")], seed=-1)
    refused(["check", good, "--baseline", str(seeded)], "probe.seed is -1")
    empty = scan_json(root / "no_layers.json", [])
    refused(["check", good, "--baseline", str(empty)], "has no layers")
    refused(["diff", str(empty), good], "has no layers")
    quitter = root / "quitter.py"
    quitter.write_text("import sys\n\ndef batches():\n    sys.exit(0)\n")
    m = warm(["inspect", good, *INSPECT, "--data", f"{quitter}:batches"])
    assert m.returncode == 2 and "sys.exit(0)" in m.stderr, m.stderr[-300:]
    gate = warm(["check", good, "--data", f"{quitter}:batches"])
    assert gate.returncode in (1, 2) and "sys.exit(0)" in gate.stdout + gate.stderr
    assert gate.returncode == 2 or "FAIL" in gate.stdout  # never a pass, never no report
    bounded(gate, WARM_BOUND_MB)
    module = root / "quitting_module.py"
    module.write_text("import sys\nsys.exit(0)\n")
    gate = warm(["check", good, "--import", str(module)])
    assert gate.returncode in (1, 2) and "sys.exit(0)" in gate.stdout + gate.stderr
    bounded(gate, WARM_BOUND_MB)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_output_folder_is_refused_before_the_work(root: Path, good: str) -> None:
    folder = root / "read_only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        m = refused(["check", "--static-only", good, "--junit",
                     str(folder / "r.xml")], "cannot be written")  # fmt: skip
        assert "PASS" not in m.stdout and not list(folder.iterdir())
    finally:
        folder.chmod(0o755)


# 7: every error is one clear line ---------------------------------------------------------------


def _npz_member(path: Path, method: int = 0, flags: int = 0) -> Path:
    """An `.npz` of one member x.npy with this zip method and flag bits."""
    array = H._npy_header(np.dtype("<f4"), (8, 5)) + b"\0" * 160
    H.write_zip(path, [H.Member("x.npy", array, method, zlib.crc32(array), len(array))])
    if flags:
        raw = bytearray(path.read_bytes())
        for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
            at = raw.find(signature)
            raw[at + offset : at + offset + 2] = struct.pack("<H", flags)
        path.write_bytes(bytes(raw))
    return path


def test_every_error_is_one_clear_line(root: Path, good: str, image_model: Path) -> None:
    negative = root / "negative.npy"
    negative.write_bytes(H._npy_header(np.dtype("<f4"), (8, 5)).replace(b"(8, 5)", b"(-8, 5)"))
    huge_header = root / "huge_header.npy"
    huge_header.write_bytes(b"\x93NUMPY\x02\x00" + (200_000).to_bytes(4, "little") + b"{"
                            + b" " * 199_998 + b"\n")  # fmt: skip
    digits = scan_json(root / "digits.json", [scan_row("dense", 10**400)])
    surrogate = root / "surrogate.json"
    surrogate.write_text(scan_json(root / "tmp.json", [scan_row("dense")]).read_text()
                         .replace('"dense"', '"dense\\ud800"'))  # fmt: skip
    unknown_rank = root / "unknown_rank.py"
    unknown_rank.write_text(
        "import tensorflow as tf\n\ndef batches():\n"
        "    return tf.data.Dataset.from_generator(lambda: iter([]), "
        "output_signature=tf.TensorSpec(None, tf.float32))\n"
    )
    raising = root / "raising.py"
    raising.write_text(
        "def batches():\n    raise RuntimeError('Traceback (most recent call last):\\n  File x')\n"
        "    yield\n"
    )
    corrupt = root / "corrupt_images"
    corrupt.mkdir()
    data = (_png(root / "ok.png", np.zeros((8, 8, 3), np.uint8))).read_bytes()
    (corrupt / "broken.png").write_bytes(data[:40] + b"\x00" * 40)
    for option in ("--data", "--input"):
        refused(["inspect", good, *INSPECT, option, str(_npz_member(root / "m99.npz", 99))],
                "compressed with zip method 99")  # fmt: skip
        refused(["inspect", good, *INSPECT, option, str(_npz_member(root / "enc.npz", 0, 1))],
                "is encrypted")  # fmt: skip
        refused(["inspect", good, *INSPECT, option, str(negative)], "not non-negative")
        m = refused(["inspect", good, *INSPECT, option, str(huge_header)], "header over 10,000")
        assert "allow_pickle" not in m.stderr
    refused(["diff", str(digits), good], "expected a finite number")
    refused(["diff", str(surrogate), good], "lone surrogate")
    refused_late(["scan", good, "--data", f"{unknown_rank}:batches"], "unknown rank")
    m = warm(["scan", good, "--data", f"{raising}:batches"])
    assert m.returncode == 2 and "RuntimeError" in m.stderr and m.stderr.count("\n") == 1
    assert "Traceback" not in m.stderr
    m = warm(["inspect", str(image_model), "--from", "conv", "--to", "head", "--data",
              str(corrupt)])  # fmt: skip
    assert m.returncode == 2 and "broken.png" in m.stderr and m.stderr.count("\n") == 1, m.stderr
    bounded(m, WARM_BOUND_MB)


def test_empty_batches_forever_end_with_an_error(root: Path, good: str) -> None:
    forever = root / "forever.py"
    forever.write_text(
        "import numpy as np\nimport tensorflow as tf\n\n"
        "def python():\n    while True:\n        yield np.zeros((0, 5), 'float32')\n\n"
        "def dataset():\n"
        "    return tf.data.Dataset.from_tensors(tf.zeros((0, 5))).repeat()\n"
    )
    for name in ("python", "dataset"):
        m = warm(["scan", good, "--data", f"{forever}:{name}", "--limit", "10"])
        assert m.returncode == 2 and "empty batches in a row" in m.stderr, m.stderr[-300:]
        assert m.stderr.count("\n") == 1
        bounded(m, WARM_BOUND_MB)


def test_grayscale_bmp_feeds_a_one_channel_model(root: Path) -> None:
    """Pixels as PIL reads them: y = sum(dense(x * x)) with ones has d y / d x = 2 x."""
    from PIL import Image

    from layergrad.commands.api import inspect_model

    folder = root / "gray"
    folder.mkdir()
    rng = np.random.default_rng(3)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (4, 4), dtype=np.uint8), "L").save(folder / f"{i}.bmp")
    x = keras.Input((4, 4, 1), name="image")
    flat = layers.Flatten(name="flat")(x)
    square = layers.Multiply(name="square")([flat, flat])
    head = layers.Dense(1, use_bias=False, kernel_initializer="ones", name="head")(square)
    model_path = root / "gray.keras"
    keras.Model(x, head).save(model_path)
    report = inspect_model(model_path, "flat", ["head"], data=folder)
    pixels = np.stack([np.asarray(Image.open(folder / f"{i}.bmp"), "float64") for i in range(3)])
    got = report.results[0].gradient
    assert got is not None
    assert np.isclose(got.mean_abs, np.mean(2 * pixels), rtol=1e-5)


# 8: large but legal inputs stay fast ------------------------------------------------------------


def test_diff_of_the_largest_scan_jsons_is_bounded(root: Path) -> None:
    from layergrad.files.report_json import MAX_PROFILE_BYTES

    def write(path: Path, scale: float) -> Path:
        rows, n = [], 0
        size = 400
        while size < MAX_PROFILE_BYTES - 200:
            row = scan_row(f"layer_{n}", 0.5 * scale)
            rows.append(row)
            size += len(json.dumps(row)) + 2
            n += 1
        return scan_json(path, rows)

    a, b = write(root / "big_a.json", 1.0), write(root / "big_b.json", 1.5)
    assert os.path.getsize(a) <= MAX_PROFILE_BYTES
    runs = {
        fmt: measure(["diff", str(a), str(b), "--format", fmt], H.TIMEOUT)
        for fmt in ("json", "table")
    }
    for m in runs.values():
        assert m.returncode == 0, m.stderr[-300:]
        bounded(m, 1024)
    doc = json.loads(runs["json"].stdout)
    assert len(doc["layers"]) == len(json.loads(a.read_text())["layers"])
    assert all(row["change"] == "changed" for row in doc["layers"][:100])


def test_zip_helpers_write_what_they_declare(root: Path) -> None:
    """The hand-written archives above are what they claim (zipfile reads them back)."""
    with zipfile.ZipFile(_npz_member(root / "plain.npz")) as zf:
        assert zf.getinfo("x.npy").compress_type == 0 and len(zf.read("x.npy")) == 288
    with zipfile.ZipFile(_npz_member(root / "enc2.npz", 0, 1)) as zf:
        assert zf.getinfo("x.npy").flag_bits & 1
