"""Hostile files built from small real models, and a way to run a command and measure it.

Shared by tests/test_hostile_*.py and benchmarks/bench_hostile.py. Every file is a few MB at
most: a decompression bomb is a real DEFLATE stream that inflates to GBs (its blocks are
repeated, so building it costs milliseconds), a shape bomb is an HDF5 dataset that declares
GBs and stores nothing. Only Keras and h5py write the base files; the hostile parts are
written by hand so that what each file declares is known exactly.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20
BOMB_MB = 2047  # what each bomb inflates to (just under the 4 GB a plain zip can declare)


# ----- measuring a command ---------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """One run of a command: exit code, output, wall time and peak resident memory."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    peak_mb: float


# A small parent that runs the command and reports its child's peak memory: measured from a
# big process (pytest with TensorFlow), the child's peak would include the parent's pages,
# which the child holds between fork and exec.
_WRAPPER = (
    "import resource, subprocess, sys\n"
    "rc = subprocess.call(sys.argv[2:])\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "open(sys.argv[1], 'w').write(str(peak))\n"
    "sys.exit(rc)\n"
)


def measure(
    args: list[str], timeout: float = 120, cwd: Path | None = None, warm: bool = False
) -> Measured:
    """Run ``python -m layergrad ARGS`` in a fresh process; kill it after ``timeout`` seconds.

    The peak resident set size is the command's own, in MB (Linux reports KB).

    ``warm``: run it instead in a child forked from a process that has already imported
    TensorFlow and layergrad (`_Warm`): the same command line, exit code, output and bounded
    wait, without the 4 s of CPU each fresh import of TensorFlow costs. Its peak counts the
    pages the child holds, its inherited TensorFlow included, but not the library pages it
    never touches; it bounds what a command allocates, not a fresh process's whole footprint.
    Only for commands that load TensorFlow: a refusal that must come before TensorFlow is
    measured fresh (`refused`).
    """
    if warm:
        return _Warm.get().run(args, timeout, cwd)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    with tempfile.TemporaryDirectory() as folder:
        peak_file = Path(folder) / "peak"
        command = [sys.executable, "-m", "layergrad", *args]
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRAPPER, str(peak_file), *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,  # a timeout kills the command too
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        seconds = time.perf_counter() - start
        peak = float(peak_file.read_text()) / 1024 if peak_file.exists() else float("inf")
    return Measured(
        proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), seconds, peak
    )


# The warm process: imports TensorFlow and layergrad (and runs no TensorFlow op, so that no
# thread pool exists to fork), then per line of JSON on stdin forks a child in a session of its
# own that runs `python -m layergrad ARGS` with the job's environment and folder, stdin from
# /dev/null and stdout, stderr to files; waits for it (killing its session after the timeout)
# and answers with its exit code and peak memory.
_WARM = r"""
import json, os, runpy, signal, sys, time, traceback
import tensorflow
import layergrad.cli
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            for fd, name in ((1, "out"), (2, "err")):
                os.dup2(os.open(job[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
            sys.stdin = open(os.devnull)
            os.environ.clear()
            os.environ.update(job["env"])
            os.chdir(job["cwd"])
            sys.argv = ["layergrad", *job["args"]]
            try:
                runpy.run_module("layergrad", run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as stop:
                if stop.code is None or isinstance(stop.code, int):
                    code = stop.code or 0
                else:
                    print(stop.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    pass
            os._exit(code)
    deadline = time.monotonic() + job["timeout"]
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            done, status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.005)
    answer = {"rc": os.waitstatus_to_exitcode(status), "peak_kb": usage.ru_maxrss}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
"""


class _Warm:
    """One warm process per test process (`measure(..., warm=True)`), started on first use."""

    _process: _Warm | None = None

    def __init__(self) -> None:
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WARM],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )

    @classmethod
    def get(cls) -> _Warm:
        if cls._process is None or cls._process.proc.poll() is not None:
            cls._process = cls()
            atexit.register(cls._process.proc.kill)
        return cls._process

    def run(self, args: list[str], timeout: float, cwd: Path | None) -> Measured:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        with tempfile.TemporaryDirectory() as folder:
            out, err = Path(folder) / "out", Path(folder) / "err"
            job = {"args": args, "env": env, "cwd": str(cwd or Path.cwd()), "timeout": timeout,
                   "out": str(out), "err": str(err)}  # fmt: skip
            start = time.perf_counter()
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
            answer = json.loads(self.proc.stdout.readline())
            seconds = time.perf_counter() - start
            stdout = out.read_bytes().decode(errors="replace") if out.exists() else ""
            stderr = err.read_bytes().decode(errors="replace") if err.exists() else ""
        return Measured(answer["rc"], stdout, stderr, seconds, answer["peak_kb"] / 1024)


BOUND_MB = 300  # a refusal before TensorFlow; layergrad alone peaks near 60 MB
TIMEOUT = 60
INSPECT = ["--from", "dense", "--to", "dense_1"]


def refused(args: list[str], *phrases: str, cwd: Path | None = None) -> Measured:
    """Run a command that must refuse: exit 2, one `error:` line with the phrases, bounded."""
    m = measure(args, TIMEOUT, cwd)
    assert m.returncode == 2, (args, m.stdout[-500:], m.stderr[-500:])
    assert m.stderr.startswith("error: ") and m.stderr.count("\n") == 1, m.stderr
    for phrase in phrases:
        assert phrase in m.stderr, (phrase, m.stderr)
    bounded(m)
    return m


def bounded(m: Measured, mb: float = BOUND_MB) -> None:
    assert m.seconds < TIMEOUT and m.peak_mb < mb, (m.seconds, m.peak_mb)
    assert "Traceback" not in m.stderr


# ----- zip archives written by hand -------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """One zip member: its stored bytes, method (0 stored, 8 deflate), CRC and inflated size."""

    name: str
    data: bytes
    method: int
    crc: int
    size: int


def stored(name: str, data: bytes) -> Member:
    return Member(name, data, 0, zlib.crc32(data), len(data))


def bomb(name: str, megabytes: int = BOMB_MB, prefix: bytes = b"") -> Member:
    """A real DEFLATE member: ``prefix`` then ``megabytes`` MB of zeros, about 1 KB per MB."""
    zeros = b"\0" * MiB
    first = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = first.compress(prefix + zeros) + first.flush(zlib.Z_FULL_FLUSH)
    again = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = again.compress(zeros) + again.flush(zlib.Z_FULL_FLUSH)
    data = head + block * (megabytes - 1) + zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    return Member(name, data, 8, _zeros_crc(prefix, megabytes), len(prefix) + megabytes * MiB)


@functools.lru_cache
def _zeros_crc(prefix: bytes, megabytes: int) -> int:
    """CRC-32 of ``prefix`` and ``megabytes`` MB of zeros, a megabyte at a time."""
    zeros, crc = b"\0" * MiB, zlib.crc32(prefix)
    for _ in range(megabytes):
        crc = zlib.crc32(zeros, crc)
    return crc


def write_zip(path: Path, members: list[Member], prefix: bytes = b"", aliases: int = 0) -> Path:
    """A zip file of these members, optionally after ``prefix`` bytes (e.g. an HDF5 file).

    ``aliases`` more directory entries point at the last member's bytes (overlapping
    members: the non-recursive zip bomb).
    """
    body, central = bytearray(prefix), bytearray()
    entries = []
    for m in members:
        name = m.name.encode()
        entries.append((m, name, len(body)))
        body += struct.pack(
            "<IHHHHHIIIHH", 0x04034B50, 20, 0, m.method, 0, 0x21, m.crc, len(m.data), m.size,
            len(name), 0,
        )  # fmt: skip
        body += name + m.data
    last, _, offset = entries[-1]
    entries += [(last, f"alias{i:04d}_{last.name}".encode(), offset) for i in range(aliases)]
    for m, name, at in entries:
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, m.method, 0, 0x21, m.crc, len(m.data),
            m.size, len(name), 0, 0, 0, 0, 0, at,
        )  # fmt: skip
        central += name
    count = len(entries)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(central), len(body), 0)
    path.write_bytes(bytes(body + central + end))
    return path


def digest(path: Path) -> str:
    """The SHA-256 of a file's bytes: a file a refused command must leave as it was."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def members_of(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def with_config(src: Path, out: Path, edit: Any) -> Path:
    """A copy of a `.keras` file whose config.json is ``edit(config)`` (edited in place)."""
    members = members_of(src)
    config = json.loads(members["config.json"])
    edit(config)
    members["config.json"] = json.dumps(config).encode()
    return write_zip(out, [stored(n, d) for n, d in members.items()])


def with_h5_config(src: Path, out: Path, edit: Any) -> Path:
    """A copy of a legacy `.h5` file whose ``model_config`` is ``edit(config)``."""
    out.write_bytes(src.read_bytes())
    with h5py.File(out, "r+") as h5:
        config = json.loads(h5.attrs["model_config"])
        edit(config)
        h5.attrs["model_config"] = json.dumps(config)
    return out


# ----- hostile files -----------------------------------------------------------------------------


def base_models(root: Path, keras: Any) -> dict[str, Path]:
    """good.keras / good.h5 (Input 5 -> dense 4 -> dense_1 2) and lambda.keras (a Lambda)."""
    layers = keras.layers
    good = keras.Sequential(
        [keras.Input((5,)), layers.Dense(4, name="dense"), layers.Dense(2, name="dense_1")],
        name="good",
    )
    out = {"good.keras": root / "good.keras", "good.h5": root / "good.h5"}
    good.save(out["good.keras"])
    good.save(out["good.h5"])
    hostile = keras.Sequential(
        [keras.Input((5,)), layers.Dense(4, name="dense"), layers.Lambda(lambda t: t * 2.0)],
        name="hostile",
    )
    out["lambda.keras"] = root / "lambda.keras"
    hostile.save(out["lambda.keras"])
    return out


def polyglot(base: dict[str, Path], out: Path) -> Path:
    """good.h5 with lambda.keras appended: valid HDF5 *and* valid zip."""
    members = [stored(n, d) for n, d in members_of(base["lambda.keras"]).items()]
    return write_zip(out, members, prefix=base["good.h5"].read_bytes())


def zip_bomb(base: dict[str, Path], out: Path, member: str) -> Path:
    """good.keras with one member replaced by a DEFLATE bomb."""
    members = members_of(base["good.keras"])
    return write_zip(out, [bomb(n) if n == member else stored(n, d) for n, d in members.items()])


def npz_bomb(out: Path) -> Path:
    """An `.npz` whose array ``x`` (float32, 5 columns) inflates to about 2 GB."""
    rows = BOMB_MB * MiB // 20
    header = _npy_header(np.dtype("<f4"), (rows, 5))
    return write_zip(out, [bomb("x.npy", BOMB_MB, prefix=header)])


def _npy_header(dtype: np.dtype[Any], shape: tuple[int, ...]) -> bytes:
    buffer = _Buffer()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                 "shape": shape}
    )  # fmt: skip
    return bytes(buffer.data)


class _Buffer:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, chunk: bytes) -> None:
        self.data += chunk


def forged_npy(out: Path, shape: tuple[int, ...]) -> Path:
    """A `.npy` whose header declares ``shape`` (float32) followed by 64 bytes of data."""
    out.write_bytes(_npy_header(np.dtype("<f4"), shape) + b"\0" * 64)
    return out


def _kernel_name(h5: Any, layer: str) -> str:
    names = [n.decode() if isinstance(n, bytes) else n for n in h5[layer].attrs["weight_names"]]
    return next(n for n in names if "kernel" in n)


@contextlib.contextmanager
def _replaced_kernel(src: Path, out: Path) -> Iterator[tuple[Any, str]]:
    """Open a copy of good.h5 with dense's kernel deleted; yields (its group, the name)."""
    out.write_bytes(src.read_bytes())
    with h5py.File(out, "r+") as h5:
        group = h5["model_weights/dense"]
        name = _kernel_name(h5, "model_weights/dense")
        del group[name]
        yield group, name


def shape_bomb(base: dict[str, Path], out: Path, kind: str) -> Path:
    """good.h5 whose dense kernel declares GBs but stores (almost) nothing.

    ``sparse``: (1, 1.5e9) float32, chunked and compressed, no chunk written (6 GB).
    ``lazy``: the same, contiguous and never written. ``huge``: (200000, 200000) float32 with
    one (1000, 1000) chunk of ones written (160 GB). ``inflating``: 64 MB chunks of zeros
    compressed about 1000x, two written.
    """
    with _replaced_kernel(base["good.h5"], out) as (group, name):
        if kind == "sparse":
            group.create_dataset(name, (1, 1_500_000_000), "f4", chunks=(1, 1 << 20),
                                 compression="gzip")  # fmt: skip
        elif kind == "lazy":
            group.create_dataset(name, (1, 1_500_000_000), "f4")
        elif kind == "huge":
            ds = group.create_dataset(name, (200_000, 200_000), "f4", chunks=(1000, 1000))
            ds[:1000, :1000] = 1.0
        else:
            ds = group.create_dataset(name, (2, 1 << 24), "f4", chunks=(1, 1 << 24),
                                      compression="gzip")  # fmt: skip
            ds[0] = np.zeros(1 << 24, "f4")
            ds[1] = np.zeros(1 << 24, "f4")
    return out


def outside_storage(base: dict[str, Path], out: Path, kind: str, target: str) -> Path:
    """good.h5 whose dense kernel lives outside the file: ``external`` link, ``soft`` link,
    ``storage`` (raw data in ``target``) or ``virtual`` (mapped from ``target``, an HDF5 file)."""
    with _replaced_kernel(base["good.h5"], out) as (group, name):
        if kind == "external":
            group[name] = h5py.ExternalLink(target, "/data")
        elif kind == "soft":
            group[name] = h5py.SoftLink("/model_weights/dense_1")
        elif kind == "storage":
            group.create_dataset(name, (5, 4), "f4", external=[(target, 0, 80)])
        else:
            layout = h5py.VirtualLayout((5, 4), "f4")
            layout[:] = h5py.VirtualSource(target, "data", (5, 4))
            group.create_virtual_dataset(name, layout)
    return out


def special_files(root: Path) -> dict[str, Path]:
    """A FIFO and a socket named like models and inputs, and /dev/zero behind a model name."""
    out = {}
    for name in ("fifo.keras", "fifo.npy"):
        out[name] = root / name
        os.mkfifo(out[name])
    out["socket.keras"] = root / "socket.keras"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(out["socket.keras"]))  # the socket file stays after close
    out["zero.keras"] = root / "zero.keras"
    out["zero.keras"].symlink_to("/dev/zero")
    out["/dev/zero"] = Path("/dev/zero")
    return out


def runaway_config(depth: int, calls: int) -> dict[str, Any]:
    """Functional models nested ``depth`` deep, each calling the one inside ``calls`` times
    in a chain: the innermost Dense runs ``calls ** depth`` times in one pass."""
    model = _functional("m0", [_input("i0"), _dense("d", "i0")], "i0", ["d", 0, 0])
    for level in range(1, depth + 1):
        inner = dict(model)
        src = f"i{level}"
        nodes = [_node(src, 0) if k == 0 else _node(inner["name"], k - 1) for k in range(calls)]
        inner["inbound_nodes"] = nodes
        model = _functional(f"m{level}", [_input(src), inner], src, [inner["name"], calls, 0])
    return model


def _functional(name: str, members: list[Any], src: str, out: list[Any]) -> dict[str, Any]:
    return {
        "module": "keras.src.models.functional",
        "class_name": "Functional",
        "name": name,
        "registered_name": "Functional",
        "config": {"name": name, "trainable": True, "layers": members,
                   "input_layers": [src, 0, 0], "output_layers": out},
    }  # fmt: skip


def _input(name: str) -> dict[str, Any]:
    return {"module": "keras.layers", "class_name": "InputLayer", "name": name,
            "config": {"batch_shape": [None, 4], "dtype": "float32", "name": name},
            "inbound_nodes": []}  # fmt: skip


def _node(src: str, index: int) -> dict[str, Any]:
    tensor = {
        "class_name": "__keras_tensor__",
        "config": {"shape": [None, 4], "dtype": "float32", "keras_history": [src, index, 0]},
    }
    return {"args": [tensor], "kwargs": {}}  # fmt: skip


def _dense(name: str, src: str) -> dict[str, Any]:
    return {"module": "keras.layers", "class_name": "Dense", "name": name,
            "config": {"name": name, "trainable": True, "units": 4},
            "inbound_nodes": [_node(src, 0)]}  # fmt: skip


def config_only(out: Path, config: dict[str, Any]) -> Path:
    """A `.keras` archive holding only this config.json and a metadata.json."""
    meta = json.dumps({"keras_version": "3.15.1"}).encode()
    return write_zip(out, [stored("config.json", json.dumps(config).encode()),
                           stored("metadata.json", meta)])  # fmt: skip
