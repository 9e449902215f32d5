"""`--distribute multi-worker`: which worker of which cluster this process is, from TF_CONFIG.

Every TensorFlow cluster manager (Kubernetes operators, Slurm scripts, Vertex AI) describes
the cluster to each process in the environment variable `TF_CONFIG`, a JSON object::

    {"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 0}}

(optionally with a `chief` task). It is read and checked here, without TensorFlow, so a
missing or malformed one is one clear line before anything starts. Workers are numbered as
`tf.distribute.MultiWorkerMirroredStrategy` numbers them: the chief first (when there is one),
then the workers by index. The chief (or worker 0 without a chief) writes the report.

Before TensorFlow connects the workers (it would wait for a missing one forever, deaf to
SIGTERM), `wait_for_peers` waits a bounded time (`--peer-timeout`, DEFAULT_PEER_TIMEOUT
seconds) until every other worker's address accepts a connection, each worker answering on
its own address meanwhile; a worker that never comes is one error line, exit code 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import socketserver
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from layergrad.core.errors import UsageError

VARIABLE = "TF_CONFIG"
ROLES = ("chief", "worker")  # the tasks that run the step (an evaluator or ps does not)
_ADDRESS = re.compile(r"^\S+:\d{1,5}$")
DEFAULT_PEER_TIMEOUT = 300.0  # seconds to wait for every other worker to start
EXAMPLE = (
    '{"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 0}}'
)


@dataclass(frozen=True)
class Cluster:
    """This process's place in the cluster: worker `index` of `workers` (chief first)."""

    workers: int
    index: int
    task_type: str
    task_index: int
    addresses: tuple[str, ...] = field(default=())  # "host:port" of every worker, chief first

    @property
    def is_chief(self) -> bool:
        """Whether this worker writes the report (the chief, or worker 0 without one)."""
        return self.index == 0


def cluster_from_env(environ: Mapping[str, str] | None = None) -> Cluster:
    """Read and check `TF_CONFIG` from `environ` (default: the process's environment).

    Raises:
        UsageError: TF_CONFIG is missing, not JSON, or does not describe this task in a
            cluster of chief / worker tasks with host:port addresses.
    """
    text = (os.environ if environ is None else environ).get(VARIABLE)
    where = f"--distribute multi-worker: {VARIABLE}"
    if text is None or not text.strip():
        raise UsageError(
            f"--distribute multi-worker needs the cluster in the environment variable "
            f"{VARIABLE}, which is not set; set it on every worker, e.g. {VARIABLE}='{EXAMPLE}'"
        )
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{where} is not JSON ({exc}); expected e.g. {EXAMPLE}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{where} is a JSON {type(doc).__name__}, not an object; e.g. {EXAMPLE}")
    cluster, task = doc.get("cluster"), doc.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise UsageError(f'{where} has no "cluster" object of task lists; e.g. {EXAMPLE}')
    if not isinstance(task, dict):
        raise UsageError(f'{where} has no "task" object ({{"type", "index"}}); e.g. {EXAMPLE}')
    tasks = {role: _addresses(cluster.get(role), role, where) for role in ROLES}
    if len(tasks["chief"]) > 1:
        raise UsageError(f"{where} lists {len(tasks['chief'])} chief tasks; a cluster has one")
    task_type, task_index = task.get("type"), task.get("index", 0)
    if task_type not in ROLES:
        raise UsageError(
            f"{where}: task type {task_type!r} does not run the step; run layergrad on the "
            f"{' and '.join(ROLES)} tasks only"
        )
    if not isinstance(task_index, int) or isinstance(task_index, bool):
        raise UsageError(f"{where}: task index {task_index!r} is not an integer")
    if not 0 <= task_index < len(tasks[task_type]):
        raise UsageError(
            f"{where}: task {task_type} {task_index} is not in the cluster, which has "
            f"{len(tasks[task_type])} {task_type} task(s)"
        )
    addresses = (*tasks["chief"], *tasks["worker"])  # numbered as the strategy numbers them
    index = task_index + (len(tasks["chief"]) if task_type == "worker" else 0)
    return Cluster(len(addresses), index, task_type, task_index, addresses)


def wait_for_peers(cluster: Cluster, timeout: float, poll: float = 0.2) -> None:
    """Wait until every other worker's address accepts a connection, at most `timeout` s,
    answering on this worker's own port meanwhile (see the module doc).

    Raises:
        UsageError: a worker did not answer in time (its address, and `--peer-timeout`).
    """
    if not cluster.addresses:
        return
    own = cluster.addresses[cluster.index]
    peers = [a for i, a in enumerate(cluster.addresses) if i != cluster.index]
    deadline = time.monotonic() + timeout
    with _answering(int(own.rpartition(":")[2])):
        while True:
            peers = [a for a in peers if not _answers(a)]
            if not peers or time.monotonic() >= deadline:
                break
            time.sleep(poll)
    if peers:
        raise UsageError(
            f"--distribute multi-worker: worker {', '.join(peers)} of {VARIABLE} did not "
            f"answer within {timeout:g} s (--peer-timeout); start every worker the cluster "
            "lists, check the addresses, or wait longer with --peer-timeout SECONDS"
        )


def _answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


class _Answering(socketserver.TCPServer):
    """Accepts connections and closes them: what tells the other workers this one is up."""

    allow_reuse_address = True
    request_queue_size = 16


@contextlib.contextmanager
def _answering(port: int) -> Iterator[None]:
    """Answer on `port` for the block, so that the other workers see this one; nothing when
    the port is taken (whatever holds it answers)."""
    try:
        server = _Answering(("", port), socketserver.BaseRequestHandler)
    except OSError:
        yield
        return
    thread = threading.Thread(
        target=server.serve_forever, args=(0.2,), name="layergrad-peers", daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=2.0)


def _addresses(value: object, role: str, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise UsageError(f'{where}: cluster "{role}" must be a list of "host:port" strings')
    bad = [a for a in value if not _ADDRESS.match(a)]
    if bad:
        raise UsageError(f'{where}: cluster "{role}" address {bad[0]!r} is not "host:port"')
    return value
