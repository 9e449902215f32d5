"""Two worker processes on localhost, configured by TF_CONFIG (`--distribute multi-worker`):
run them, run one process, compare the reports.

Each run starts two fresh processes (MultiWorkerMirroredStrategy configures TensorFlow's
collectives at start-up); both are killed in `finally`, and every wait is bounded.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

TIMEOUT = 240  # seconds for one run of both workers


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on (held open together so that they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(ports: list[int], index: int) -> str:
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["CUDA_VISIBLE_DEVICES"] = env.get("CUDA_VISIBLE_DEVICES", "")  # two workers, one GPU
    return {**env, **extra}


def run_workers(
    args: list[str], tmp_path: Path, command: list[str] | None = None
) -> list[subprocess.CompletedProcess]:
    """Run `layergrad ARGS --distribute multi-worker --json` (or `command`) as workers 0, 1;
    once more on other ports if another program took one between choosing and binding it."""
    if command is None:
        command = [sys.executable, "-m", "layergrad", *args, "--distribute", "multi-worker",
                   "--json"]  # fmt: skip
    done = _run_once(command, tmp_path)
    if any("address already in use" in d.stderr.lower() for d in done):
        done = _run_once(command, tmp_path)
    return done


def _run_once(command: list[str], tmp_path: Path) -> list[subprocess.CompletedProcess]:
    ports = free_ports(2)
    procs, files = [], []
    try:
        for index in range(2):
            out = (tmp_path / f"w{index}.out").open("w")
            err = (tmp_path / f"w{index}.err").open("w")
            files += [out, err]
            procs.append(
                subprocess.Popen(
                    command, cwd=tmp_path, stdout=out, stderr=err,
                    env=environment(TF_CONFIG=tf_config(ports, index)),
                )
            )  # fmt: skip
        for p in procs:
            p.wait(timeout=TIMEOUT)
    finally:
        for p in procs:  # both, whatever happened (a timeout, a failed assertion)
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
        for f in files:
            f.close()
    return [
        subprocess.CompletedProcess(
            command,
            p.returncode,
            (tmp_path / f"w{i}.out").read_text(),
            (tmp_path / f"w{i}.err").read_text(),
        )
        for i, p in enumerate(procs)
    ]


def two_workers(args: list[str], tmp_path: Path) -> tuple[dict, list[subprocess.CompletedProcess]]:
    """The chief's report of `run_workers`, and both processes' outcomes (checked)."""
    done = run_workers(args, tmp_path)
    for d in done:
        assert d.returncode in (0, 1), d.stderr[-2000:]
    assert done[1].stdout == "", "a worker that is not the chief printed on stdout"
    assert done[1].returncode == 0
    return json.loads(done[0].stdout), done


def one_process(args: list[str], tmp_path: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "layergrad", *args, "--json"],
        capture_output=True, text=True, cwd=tmp_path, timeout=TIMEOUT, env=environment(),
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def without_replicas(doc: object) -> object:
    """The document with `probe.replicas` (devices the step ran on) left out."""
    if isinstance(doc, dict):
        return {k: without_replicas(v) for k, v in doc.items() if k != "replicas"}
    if isinstance(doc, list):
        return [without_replicas(v) for v in doc]
    return doc


def assert_same_report(many: dict, one: dict) -> None:
    """Equal documents, numbers within rtol 1e-5 (only the order of the sums differs)."""
    a, b = without_replicas(many), without_replicas(one)

    def walk(x: object, y: object, where: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            assert x.keys() == y.keys(), where
            for k in x:
                walk(x[k], y[k], f"{where}.{k}")
        elif isinstance(x, list) and isinstance(y, list):
            assert len(x) == len(y), where
            for i, (u, v) in enumerate(zip(x, y, strict=True)):
                walk(u, v, f"{where}[{i}]")
        elif isinstance(x, float) or isinstance(y, float):
            assert x == pytest.approx(y, rel=1e-5, abs=1e-12), where
        else:
            assert x == y, where

    walk(a, b, "report")


def run_both(args: list[str], tmp_path: Path) -> tuple[dict, dict]:
    many, _ = two_workers(args, tmp_path)
    one = one_process(args, tmp_path)
    if "probe" in one:
        assert many["probe"]["replicas"] == 2 and one["probe"]["replicas"] == 1
    assert_same_report(many, one)
    return many, one
