"""`plateau serve`: N consumer workers in one group, sharing this node's store.

With one worker it runs in this process. With more, each worker is a child process (its
own GIL, its own consumer, its own writer) and this process supervises them: it runs
retention, forwards the stop signal, and restarts a worker that died unexpectedly.
SIGTERM or SIGINT stop gracefully (seal, commit, close within shutdown_timeout); a second
signal exits at once, which recovery on the next start handles.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import TYPE_CHECKING

import structlog

from bridge.allocators import tune_allocators
from bridge.config.models import Config
from bridge.consume.build import build_worker
from bridge.consume.landing import PoisonStopError
from bridge.logs import configure_logging
from bridge.ops.endpoint import MetricsEndpoint
from bridge.ops.metrics import ServeCollector, ServeCounters, registry
from bridge.ops.monitor import Monitor
from bridge.ops.stack_dump import install_stack_dump
from bridge.ops.worker_status import new_run_id, remove_run, remove_stale
from bridge.store import open_store, retention_for
from bridge.version import version
from plateau_core import Store
from plateau_core.journal_files import JOURNAL_DIR, SUFFIX
from plateau_core.recovery import sweep_unowned
from plateau_core.verify import verify_at_start

if TYPE_CHECKING:
    from bridge.kafka_api.server import KafkaApiServer

log = structlog.get_logger(__name__)

EXIT_POISON = 3
EXIT_ERROR = 1
# Stopped with everything sealed in the store, but Kafka did not answer the last offset
# commit or the close within shutdown_timeout: the group's committed offset trails the store.
EXIT_KAFKA_UNANSWERED = 4


def install_stop_handlers(stop: threading.Event) -> None:
    """The first SIGTERM or SIGINT sets `stop`; a second exits at once. Counted by signals,
    not by `stop`: a worker process told to stop over its pipe can run the handler of the
    signal sent to the whole group only after that (Python runs handlers on the main thread
    between bytecodes, later when it waits in a C call), and that is still the first one."""
    signalled = threading.Event()

    def handle(signum: int, _frame: FrameType | None) -> None:
        if signalled.is_set():
            log.warning("exit_now", signal=signal.Signals(signum).name)
            os._exit(130)
        signalled.set()
        log.info("stopping", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    # A serve that does not stop (or stalls) can be asked where every thread is, without
    # stopping it.
    install_stack_dump()


def serve(config: Config, workers: int = 1, stop: threading.Event | None = None) -> int:
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        install_stop_handlers(stop)
    tune_allocators()
    store = open_store(config)
    run = new_run_id()
    remove_stale(store.data_dir)
    counters = ServeCounters()
    monitor = Monitor(store.data_dir, run, config.metrics.stall_after)
    endpoint = None
    try:
        if config.metrics.enabled:
            collector = ServeCollector(config, store, monitor, counters)
            endpoint = MetricsEndpoint(*config.metrics.address, registry(collector), monitor)
        retention = retention_for(config, store, counters.retired)
        counters.retention = retention
        retention.run()  # completes deletions a crash interrupted
        # Before any worker serves or seals: bad segments are quarantined, never read.
        verify_at_start(store, full=config.storage.verify_on_start)
        # Before any writer takes a partition: the folders it takes sweep themselves, the
        # others (a topic no longer configured, one nothing writes to) only here.
        sweep_unowned(store)
    except BaseException:
        store.close()
        raise
    retention.start(config.storage.retention_interval)
    listener = None
    try:
        listener = _start_listener(config, store, run)
    except BaseException:
        retention.stop()
        store.close()
        raise
    monitor.start()
    if endpoint is not None:
        endpoint.start()
    if listener is not None:
        # The listener keeps objects per produced batch until its seal, as a worker does
        # per record (measured with 128-byte records: 1.1 s of 2.2 s in full collections).
        tune_gc()
        _stop_listener_with(listener, stop, config.shutdown_timeout)
    consuming = bool(config.consumed)
    log.info(
        "serve_started",
        version=version(),
        workers=workers if consuming else 0,
        data_dir=str(store.data_dir),
        bootstrap_servers=config.kafka.bootstrap_servers if consuming else None,
        group_id=config.kafka.group_id if consuming else None,
        kafka_api=None if listener is None else "{}:{}".format(*listener.address or ("?", 0)),
        run=run,
    )
    try:
        code = _until_stopped(config, store, stop, workers=workers, run=run, counters=counters)
    finally:
        if listener is not None:
            # Returns at once when the stopper above already stopped it.
            listener.stop(config.shutdown_timeout)
        if endpoint is not None:
            endpoint.stop()
        monitor.stop()
        retention.stop()
        remove_run(store.data_dir, run)
        store.close()
    return _exit_code(code, listener)


def _until_stopped(
    config: Config,
    store: Store,
    stop: threading.Event,
    *,
    workers: int,
    run: str,
    counters: ServeCounters,
) -> int:
    """The consume workers' run (or, produce-only, the wait for `stop`); their exit code."""
    if not config.consumed:
        stop.wait()
        return 0
    if workers == 1:
        return run_worker(config, store, stop, "worker-0", run)
    return _supervise(config, workers, stop, run, counters)


def _exit_code(code: int, listener: KafkaApiServer | None) -> int:
    """serve's exit code: the workers', or 1 when the Kafka API's stop failed (its final seals
    failed, or it did not stop in time). Logged where it happened (kafka_api_failed,
    kafka_api_stop_timed_out); the status says it too, so that a supervisor does not take a
    stop that left records to the journal's replay for a clean one."""
    failed = None if listener is None else listener.failure
    if failed is None:
        return code
    log.error("serve_stopped_with_failure", part="kafka_api", error=str(failed))
    return code or 1


def _stop_listener_with(listener: KafkaApiServer, stop: threading.Event, timeout_s: float) -> None:
    """Stop the listener, from a thread of its own, once `stop` is set: it drains beside the
    consume workers, not after them. One after the other, the two shutdowns took up to twice
    shutdown_timeout, past what a supervisor sized to it waits before it kills serve."""

    def stop_when_set() -> None:
        stop.wait()
        listener.stop(timeout_s)

    threading.Thread(target=stop_when_set, name="kafka-api-stopper", daemon=True).start()


def _start_listener(config: Config, store: Store, run: str) -> KafkaApiServer | None:
    """The Kafka API listener, when configured; it opens the produced partitions first."""
    if config.kafka_api is None:
        _warn_of_a_journal_left(store)
        return None
    from bridge.kafka_api.server import KafkaApiServer  # noqa: PLC0415

    api = config.kafka_api
    if api.sasl is not None and "PLAIN" in api.sasl.mechanisms and api.tls is None:
        # Kafka allows it too (SASL_PLAINTEXT), so it is not refused; but every PLAIN
        # client then sends its password in clear to whoever can see the traffic.
        log.warning(
            "kafka_api_plain_without_tls",
            listen=api.listen,
            detail="SASL PLAIN on a listener without TLS sends passwords in clear: add "
            "kafka_api.tls, or offer only SCRAM-SHA-256/512",
        )
    listener = KafkaApiServer(config, store, run=run)
    listener.start()
    return listener


def _warn_of_a_journal_left(store: Store) -> None:
    """Only the Kafka API's writer replays its journal: without a kafka_api section, what
    it acknowledged and did not seal before a crash stays unread until the section is back."""
    directory = store.data_dir / JOURNAL_DIR
    files = sorted(directory.glob(f"*{SUFFIX}")) if directory.is_dir() else []
    if files:
        log.warning(
            "journal_not_replayed",
            directory=str(directory),
            files=len(files),
            bytes=sum(path.stat().st_size for path in files),
            detail="records the Kafka API acknowledged before it stopped without sealing "
            "them; they are not readable until serve runs with a kafka_api section again, "
            "which replays them",
        )


def run_worker(
    config: Config, store: Store, stop: threading.Event, name: str, run: str | None = None
) -> int:
    tune_gc()
    worker = build_worker(config, store, stop, name=name, run=run)
    try:
        worker.run()
    except PoisonStopError as exc:
        log.error("worker_stopped_on_poison", worker=name, error=str(exc))
        return EXIT_POISON
    return 0 if worker.kafka_answered else EXIT_KAFKA_UNANSWERED


def tune_gc() -> None:
    """Make the cyclic garbage collector run per 100,000 net allocations instead of 700.

    consume() creates a tracked object per record, so at the default threshold the collector
    runs dozens of times per poll, and its full collections scan everything the process
    holds: measured on a 5M-record run, 2.7 s of 11 s went to it (bench/ingest_bench.py).
    Objects from start-up are frozen out of the scans. Cycles are still collected, only less
    often; the memory they hold in the meantime is small next to the memory budget.
    """
    gc.freeze()
    gc.set_threshold(100_000, 20, 20)


def _child(
    config: Config, name: str, run: str, log_level: str, log_format: str, *, told: Connection
) -> None:
    configure_logging(log_level, log_format)
    tune_allocators()
    stop = threading.Event()
    install_stop_handlers(stop)
    threading.Thread(
        target=_stop_when_told, args=(told, stop), name="stop-word", daemon=True
    ).start()
    try:
        store = open_store(config)
        try:
            code = run_worker(config, store, stop, name, run)
        finally:
            store.close()
    except Exception as exc:
        # One event in serve's log, not multiprocessing's traceback on stderr between its
        # JSON lines; still exit 1, a crash, which serve restarts.
        log.exception("worker_failed", worker=name, error=str(exc), error_type=type(exc).__name__)
        code = EXIT_ERROR
    raise SystemExit(code)


def _stop_when_told(told: Connection, stop: threading.Event) -> None:
    """Stop on serve's word, or when serve is gone (the pipe's end closes with it).

    serve does not forward its signal: systemd (KillMode=control-group) and a Ctrl-C at a
    terminal signal every process of the group already, and a second signal means "exit
    at once", which would drop what the worker is sealing."""
    with contextlib.suppress(EOFError, OSError):
        told.recv()
    stop.set()


def _supervise(
    config: Config, workers: int, stop: threading.Event, run: str, counters: ServeCounters
) -> int:
    context = multiprocessing.get_context("spawn")
    level = os.environ.get("PLATEAU_LOG_LEVEL", "INFO")
    # The children's stderr is this process's: "auto" decides the same way there.
    log_format = os.environ.get("PLATEAU_LOG_FORMAT", "auto")
    children: dict[str, BaseProcess] = {}
    words: dict[str, Connection] = {}
    restarts: dict[str, float] = {}
    finished: dict[str, int] = {}

    def start(name: str) -> None:
        told, tell = context.Pipe(duplex=False)
        process = context.Process(
            target=_child,
            args=(config, name, run, level, log_format),
            kwargs={"told": told},
            name=name,
        )
        process.start()
        told.close()
        children[name] = process
        words[name] = tell
        log.info("worker_process_started", worker=name, pid=process.pid)

    for i in range(workers):
        start(f"worker-{i}")
    while not stop.is_set() and children:
        time.sleep(0.2)
        for name, process in list(children.items()):
            if process.is_alive():
                continue
            code = process.exitcode or 0
            del children[name]
            words.pop(name).close()
            if code in (0, EXIT_POISON, EXIT_KAFKA_UNANSWERED):
                finished[name] = code
                continue
            # Crashed: recovery on acquire makes a restart safe; back off if it keeps dying.
            delay = 1.0 if time.monotonic() - restarts.get(name, 0.0) > 60 else 10.0
            log.error("worker_process_died", worker=name, exit_code=code, restart_in_s=delay)
            restarts[name] = time.monotonic()
            counters.restarted()
            if not stop.wait(delay):
                start(name)
    for tell in words.values():
        with contextlib.suppress(OSError):
            tell.send("stop")
    deadline = time.monotonic() + config.shutdown_timeout + 5
    for name, process in children.items():
        process.join(max(0.1, deadline - time.monotonic()))
        if process.is_alive():
            log.error("worker_process_killed", worker=name, pid=process.pid)
            process.kill()
            process.join(5)
        ended = process.exitcode
        # None or negative: not ended, or ended by a signal (the kill above), without
        # sealing what it held.
        finished[name] = EXIT_ERROR if ended is None or ended < 0 else ended
    for tell in words.values():
        tell.close()
    return worst_exit(finished.values())


def worst_exit(codes: Iterable[int]) -> int:
    """The exit code of serve from its workers': the highest, but a worker that only could
    not tell Kafka its last offsets (everything it held is in the store) below one that
    failed."""
    return max(codes, key=lambda code: 0.5 if code == EXIT_KAFKA_UNANSWERED else code, default=0)
