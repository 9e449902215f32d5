"""Choose where the step runs: one device, or mirrored over every GPU (or split CPUs).

`--distribute mirrored` splits each batch between the replicas of a `MirroredStrategy` over
every visible GPU (the CPU without one); `--cpu-replicas N` mirrors over N logical CPU devices
(the same path, testable in CI), which can be set only before TensorFlow initialises its
devices. `--distribute multi-worker` is a `MultiWorkerMirroredStrategy` from `TF_CONFIG`, made
once per process (TensorFlow configures its collectives once).
"""

from __future__ import annotations

import contextlib
import signal
import threading

from layergrad.core.cluster import (
    DEFAULT_PEER_TIMEOUT,
    Cluster,
    cluster_from_env,
    wait_for_peers,
)
from layergrad.core.errors import InputError, UsageError
from layergrad.core.tf_runtime import tf
from layergrad.core.tf_types import Strategy

DISTRIBUTIONS = ("mirrored", "multi-worker")
MULTI_WORKER = "multi-worker"


def strategy_for(
    distribute: str | None,
    cpu_replicas: int | None = None,
    peer_timeout: float | None = None,
    cluster: Cluster | None = None,
) -> Strategy:
    """The tf.distribute strategy for `--distribute` (None: TensorFlow's default strategy, one
    device; "mirrored"; "multi-worker": the process's MultiWorkerMirroredStrategy over
    `cluster`, read from TF_CONFIG when None, once the other workers answer within
    `peer_timeout` s) or `--cpu-replicas` (mirrored over that many logical CPU devices).

    Raises:
        InputError: an unknown distribution, logical devices asked for after TensorFlow
        initialised its devices with fewer, or a missing or malformed TF_CONFIG.
    """
    if distribute is not None and distribute not in DISTRIBUTIONS:
        raise UsageError(
            f"--distribute must be one of {', '.join(DISTRIBUTIONS)}: distribute={distribute!r}"
        )
    if distribute == MULTI_WORKER and cpu_replicas is not None:
        raise InputError(
            "--cpu-replicas splits one machine's CPU; with --distribute multi-worker each "
            "worker mirrors over its own devices: drop --cpu-replicas"
        )
    if cpu_replicas is not None:
        if cpu_replicas < 1:
            raise UsageError(f"--cpu-replicas must be at least 1: cpu_replicas={cpu_replicas}")
        return tf.distribute.MirroredStrategy(split_cpu(cpu_replicas)[:cpu_replicas])
    if distribute == MULTI_WORKER:
        timeout = DEFAULT_PEER_TIMEOUT if peer_timeout is None else peer_timeout
        return _multi_worker(cluster or cluster_from_env(), timeout)
    if distribute == "mirrored":
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


_MADE: dict[str, Strategy] = {}


def _multi_worker(cluster: Cluster, peer_timeout: float) -> Strategy:
    """The process's one MultiWorkerMirroredStrategy (it connects to the other workers),
    made once the other workers answer."""
    if "strategy" in _MADE:
        return _MADE["strategy"]
    wait_for_peers(cluster, peer_timeout)
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if previous is not None:  # TensorFlow's runtime took SIGTERM (its preemption notice)
        signal.signal(signal.SIGTERM, previous)
    _MADE["strategy"] = strategy
    return strategy


def is_multi_worker(strategy: Strategy) -> bool:
    """Whether `strategy` spans several processes (its statistics meet through collectives)."""
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def split_cpu(count: int) -> list[str]:
    """Configure `count` logical CPU devices (before TensorFlow starts); return their names."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    # RuntimeError: devices are initialised already, which is fine if there are enough
    with contextlib.suppress(RuntimeError):
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        )
    names = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(names) < count:
        raise InputError(
            f"--cpu-replicas {count}: TensorFlow started with {len(names)} CPU device(s) "
            "already, and logical devices can only be set before it starts; pass "
            "--cpu-replicas on the command line, or call this before any TensorFlow work"
        )
    return names
