"""Every limit layergrad applies to what an untrusted file declares, in one place.

A model or input file is read in time and memory proportional to what it really stores, not
to what its headers declare. docs/safety.md lists these values; change them
together.
"""

from __future__ import annotations

import re

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

MAX_CONFIG_BYTES = 64 * MiB
"""Largest `config.json` / `metadata.json` member or `.h5` `model_config` attribute read."""

MAX_INFLATION = 100
"""A zip member that inflates more than this many times its stored size is suspect; Keras
stores members uncompressed and DEFLATE cannot exceed about 1032x."""

INFLATION_ALLOWANCE = 64 * MiB
"""Total inflated bytes of suspect members tolerated in one archive before it is refused."""

WEIGHT_SCAN_BUDGET = 4 * GiB
"""Bytes of weights read per file for weight health; later tensors are listed, not scanned."""

MAX_HDF5_CHUNK_BYTES = 64 * MiB
"""Largest HDF5 chunk (uncompressed) weight health will decompress."""

MAX_HDF5_CHUNKS = 100_000
"""Most stored chunks weight health reads from one chunked dataset."""

MAX_GRAPH_CALLS = 1_000_000
"""Most layer calls in one run of a model (nested models multiply their members' calls)."""

DEFAULT_MAX_MEMORY = 8 * GiB
"""Default budget for the probe's estimated memory; `--max-memory` raises it."""

MAX_FORTRAN_BYTES = 512 * MiB
"""Largest `--data` array saved in Fortran order read: its rows are not contiguous, so it is
read whole and turned into row order (C order arrays are read a batch at a time)."""

MAX_NPY_HEADER = 10_000
"""Largest `.npy` header read (numpy's own default for safe loading)."""

MAX_PROBES = 4096
"""Most `--probes` (random projections of a Jacobian estimate; each is a backward pass and a
batch-sized vector kept in memory)."""

MAX_CPU_REPLICAS = 64
"""Most `--cpu-replicas` (logical CPU devices; each replica holds the model's variables)."""

MAX_BATCH_SIZE = 1 << 20
"""Largest `--batch-size`; the memory estimate also counts every row of the batch."""

MAX_LIMIT = 1 << 53
"""Largest `--limit` (TensorFlow counts samples in 64-bit integers)."""

MAX_STEPS = 1_000_000
"""Most `--steps`, `--epochs` and `--every` of the commands that train (`fit`, `fix`): the
report keeps every step's loss."""

MAX_SEED = 2**32 - 1
"""Largest `--seed` (seeds are 0 ... 2**32 - 1; a negative seed is a usage error)."""

MAX_IMAGE_PIXELS = 64 * 1024 * 1024
"""Most pixels (width x height, from the file's header) of one image in a `--data` folder;
a decoded 64-megapixel RGBA image is 256 MB."""

IMAGE_DECODERS = 2
"""Images decoded at once from a `--data` folder (with MAX_IMAGE_PIXELS: at most 512 MB)."""

MAX_TEXT_BATCH_BYTES = 256 * MiB
"""Most bytes of one batch of a string input (`--input`, each `--data` batch): numpy keeps
fixed-width text at 4 bytes a character of the longest string, so a few long strings make a
wide array; a wider batch is refused with the batch size that fits."""

MAX_EMPTY_BATCHES = 10_000
"""A data source that yields this many empty batches in a row is refused (it would spin
forever without a sample)."""

_UNITS = {"": 1, "B": 1, "K": KiB, "KB": KiB, "KIB": KiB, "M": MiB, "MB": MiB, "MIB": MiB,
          "G": GiB, "GB": GiB, "GIB": GiB, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}  # fmt: skip


def parse_size(text: str) -> int:
    """Bytes in a size such as ``8GB``, ``512MiB``, ``1.5G`` or ``1000000`` (units of 1024).

    Raises:
        ValueError: the text is not a positive size.
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else ""
    if not match or unit not in _UNITS or float(match.group(1)) <= 0:
        raise ValueError(f"expected a size such as 8GB, 512MB or 1.5G, got {text!r}")
    return int(float(match.group(1)) * _UNITS[unit])


def human(n: float) -> str:
    """A byte count for people: ``6.0 GB``, ``512 KB``, ``17 B`` (units of 1024)."""
    for unit, size in (("TB", 1 << 40), ("GB", GiB), ("MB", MiB), ("KB", KiB)):
        if abs(n) >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 100 else f"{value:,.0f} {unit}"
    return f"{int(n)} B"


MAX_UNSIZED_EPOCH = 1_000_000
"""`fit --epochs` over a source that does not say how many samples it holds (a data
function) and without `--limit`: an epoch longer than this is refused as endless."""
