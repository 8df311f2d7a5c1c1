"""A consume worker and what it talks to: its Kafka consumer, its writer over the store and
its dead-letter sink, wired together."""

from __future__ import annotations

import functools
import queue
import threading

from bridge.config.models import Config
from bridge.consume.client import ConsumerFactory, dead_letter_settings, new_consumer
from bridge.consume.dlq import DeadLetters
from bridge.consume.sealed import Committable, SealListener
from bridge.consume.worker import Worker
from bridge.ops.telemetry import WorkerTelemetry
from bridge.ops.worker_status import StatusFile, new_run_id
from plateau_core import Store, WriterPolicy


def build_worker(
    config: Config,
    store: Store,
    stop: threading.Event,
    *,
    name: str = "worker-0",
    run: str | None = None,
    consumer: ConsumerFactory | None = None,
) -> Worker:
    """A worker named `name` of the serve run `run` (a new one if None), consuming into a
    writer of `store` until `stop` is set. `consumer`: what makes its Kafka consumer, a
    real one (new_consumer) unless given."""
    status = StatusFile(config.storage.data_dir, name, run or new_run_id())
    telemetry = WorkerTelemetry()
    previous = status.previous()
    if previous is not None:  # restarted by the supervisor: counters carry on
        telemetry.load(previous.get("telemetry", {}))
    # The writer's threads tell the worker's thread through these two: its listener puts
    # the offsets that may be committed on `sealed` and sets `wake` when room frees.
    sealed: queue.SimpleQueue[Committable] = queue.SimpleQueue()
    wake = threading.Event()
    storage = config.storage
    writer = store.writer(
        WriterPolicy(
            memory_budget_bytes=storage.memory_budget,
            writer_threads=storage.writer_threads,
            compression=storage.compression,
            compression_adaptive=storage.compression_adaptive,
            min_free_disk_bytes=storage.min_free_disk or 0,
        ),
        SealListener(sealed, wake, telemetry),
    )
    return Worker(
        config,
        store,
        stop,
        consumer=consumer or functools.partial(new_consumer, config, f"plateau-{name}"),
        writer=writer,
        sealed=sealed,
        wake=wake,
        dead_letters=DeadLetters(dead_letter_settings(config)),
        status=status,
        telemetry=telemetry,
        name=name,
    )
