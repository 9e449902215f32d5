"""Two worker processes on localhost, configured by TF_CONFIG (`--distribute multi-worker`):
run them, run one process, compare the reports.

Each run starts two fresh processes (MultiWorkerMirroredStrategy configures TensorFlow's
collectives at start-up); both are killed in `finally`, and every wait is bounded.
`one_cluster` runs a list of commands in one such run (each worker invokes the command line
once per command), and the same list in this process: a cluster started once for a module.
`one_process` runs such a list in one new process (`--cpu-replicas` must split the CPU before
TensorFlow starts).
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


def without_replicas(doc: object) -> object:
    """The document with `probe.replicas` (devices the step ran on) left out."""
    if isinstance(doc, dict):
        return {k: without_replicas(v) for k, v in doc.items() if k != "replicas"}
    if isinstance(doc, list):
        return [without_replicas(v) for v in doc]
    return doc


def assert_same_report(many: dict, one: dict) -> None:
    """Equal documents, numbers within rtol 1e-5 (only the order of the sums differs)."""
    assert_same_document(without_replicas(many), without_replicas(one), rel=1e-5)


def assert_same_document(x: object, y: object, rel: float, where: str = "report") -> None:
    """The same JSON document, key by key and item by item; floats within `rel`."""
    if isinstance(x, dict) and isinstance(y, dict):
        assert x.keys() == y.keys(), where
        for k in x:
            assert_same_document(x[k], y[k], rel, f"{where}.{k}")
    elif isinstance(x, list) and isinstance(y, list):
        assert len(x) == len(y), where
        for i, (u, v) in enumerate(zip(x, y, strict=True)):
            assert_same_document(u, v, rel, f"{where}[{i}]")
    elif isinstance(x, float) or isinstance(y, float):
        assert x == pytest.approx(y, rel=rel, abs=1e-12), where
    else:
        assert x == y, where


INVOKE = """
import contextlib, io, traceback
from click.testing import CliRunner
from layergrad.cli.app import main


def outcomes(commands, extra):
    \"\"\"Each command in turn, then `extra` (--distribute multi-worker, or nothing).\"\"\"
    out = []
    for args in commands:
        if args[0] == "--python":  # code run in this process, its stdout kept
            stdout, code, error = io.StringIO(), 0, ""
            try:
                with contextlib.redirect_stdout(stdout):
                    exec(compile(args[1], "<step>", "exec"), {})
            except Exception:
                code, error = 1, traceback.format_exc()
            out.append({"code": code, "stdout": stdout.getvalue(), "stderr": "", "error": error})
            continue
        done = CliRunner().invoke(main, [*args, *extra])
        error = ""  # an exception the command line let out (SystemExit is its exit code)
        if done.exception is not None and not isinstance(done.exception, SystemExit):
            error = "".join(traceback.format_exception(*done.exc_info))
        out.append(
            {"code": done.exit_code, "stdout": done.stdout, "stderr": done.stderr[-3000:],
             "error": error}
        )
    return out
"""
SCRIPT = (
    INVOKE
    + """
import json, sys
print(json.dumps(outcomes(json.loads(open(sys.argv[1]).read()), sys.argv[2:])))
"""
)


def in_this_process(commands: list[list[str]], where: Path) -> list[dict]:
    """The outcomes of `commands` (as in `one_cluster`) run here, from folder `where`, without
    TF_CONFIG: one process, no new interpreter to pay for."""
    namespace: dict = {}
    exec(compile(INVOKE, "<invoke>", "exec"), namespace)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(where)
        patch.delenv("TF_CONFIG", raising=False)
        return namespace["outcomes"](commands, [])


def one_cluster(
    commands: list[list[str]], where: Path
) -> tuple[list[dict], list[dict], list[dict]]:
    """Each command (`layergrad` arguments, or `["--python", code]`) in turn, in one cluster of
    two workers and in one process (this one), from folder `where`: the outcomes ({"code",
    "stdout", "stderr", "error"}) of the chief, of the other worker and of the one process."""
    (where / "commands.json").write_text(json.dumps(commands))
    (where / "run.py").write_text(SCRIPT)
    run = [sys.executable, "run.py", "commands.json"]
    many = run_workers([], where, [*run, "--distribute", "multi-worker"])
    for d in many:
        assert d.returncode == 0, d.stderr[-3000:]
    chief, other = (json.loads(d.stdout) for d in many)
    return chief, other, in_this_process(commands, where)


def one_process(commands: list[list[str]], where: Path) -> list[dict]:
    """Each command (as in `one_cluster`) in turn in one fresh process, from folder `where`:
    their outcomes. For what must start with the process (`--cpu-replicas` splits the CPU
    before TensorFlow starts), paid for once instead of once per command."""
    (where / "commands.json").write_text(json.dumps(commands))
    (where / "run.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "run.py", "commands.json"], capture_output=True, text=True, cwd=where,
        timeout=TIMEOUT, env=environment(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def same_outcome(runs: tuple[list[dict], list[dict], list[dict]], index: int) -> tuple[dict, dict]:
    """Command `index` of `one_cluster`: the chief's report and the one process's, checked
    equal (rtol 1e-5), run on two replicas against one; the other worker printed nothing."""
    chief, other, one = runs
    assert chief[index]["code"] in (0, 1), chief[index]
    assert chief[index]["code"] == one[index]["code"], (chief[index], one[index])
    assert (other[index]["code"], other[index]["stdout"]) == (0, ""), "the other worker printed"
    many, single = json.loads(chief[index]["stdout"]), json.loads(one[index]["stdout"])
    if "probe" in single:
        assert many["probe"]["replicas"] == 2 and single["probe"]["replicas"] == 1
    assert_same_report(many, single)
    return many, single
