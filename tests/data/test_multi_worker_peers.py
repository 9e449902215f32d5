"""`--distribute multi-worker` with a worker that never starts: a bounded wait
(`--peer-timeout`), one error line and exit 2; SIGTERM and SIGINT stop it at any point.

One real process each (the other worker of TF_CONFIG is never started); every wait bounded.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import keras
from workers import environment, free_ports, tf_config

from layergrad.core.cluster import Cluster, wait_for_peers
from layergrad.core.errors import UsageError

pytestmark = pytest.mark.slow  # fresh processes, each waiting for its peer: seconds


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("peers")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.save(path / "seed.keras")
    np.save(path / "all.npy", np.ones((16, 4), "float32"))
    return path


def start(folder, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "layergrad", "scan", "seed.keras", "--data", "all.npy",
               "--distribute", "multi-worker", "--json", *extra]  # fmt: skip
    return subprocess.Popen(
        command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=environment(TF_CONFIG=tf_config(free_ports(2), 0)),
    )  # fmt: skip


def finish(process: subprocess.Popen, timeout: float = 120) -> tuple[str, str]:
    try:
        return process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_a_worker_that_never_starts_is_one_error_and_exit_2_after_the_peer_timeout(folder):
    start_time = time.monotonic()
    process = start(folder, "--peer-timeout", "4")
    out, err = finish(process)
    assert process.returncode == 2, err
    assert out == ""
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "did not answer within 4 s" in lines[0]
    assert "--peer-timeout" in lines[0]
    assert time.monotonic() - start_time < 110


@pytest.fixture(scope="module")
def signalled(folder):
    """Two workers waiting for their peer (the default wait: minutes), started together; once
    both are well into the wait, one gets SIGTERM and the other SIGINT: {signal: (exit code,
    stdout, stderr)}."""
    processes = {sent: start(folder) for sent in (signal.SIGTERM, signal.SIGINT)}
    try:
        time.sleep(12)
        for sent, process in processes.items():
            process.send_signal(sent)
        outputs = {sent: finish(p, timeout=60) for sent, p in processes.items()}
        return {sent: (processes[sent].returncode, *out) for sent, out in outputs.items()}
    finally:
        for process in processes.values():  # both, whatever happened
            if process.poll() is None:
                process.kill()
                process.communicate()


@pytest.mark.parametrize(("sent", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_and_sigint_stop_a_worker_waiting_for_its_peer(signalled, sent, code):
    returncode, out, err = signalled[sent]
    assert returncode == code, err
    assert out == "" and "error: stopped by" in err


def test_wait_for_peers_returns_once_the_other_worker_answers_and_bounds_the_wait():
    import socket
    import threading

    ports = free_ports(2)
    addresses = tuple(f"localhost:{p}" for p in ports)
    cluster = Cluster(workers=2, index=0, task_type="worker", task_index=0, addresses=addresses)
    with pytest.raises(UsageError, match=f"localhost:{ports[1]}"):
        wait_for_peers(cluster, timeout=0.5, poll=0.05)
    peer = socket.socket()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    peer.bind(("localhost", ports[1]))
    late = threading.Timer(0.5, peer.listen)  # the other worker comes up late
    late.start()
    try:
        wait_for_peers(cluster, timeout=20, poll=0.05)  # returns: it answers
        # and this worker answered on its own port meanwhile; after, the port is free again
        with socket.create_server(("localhost", ports[0])):
            pass
    finally:
        late.join()
        peer.close()
