"""Running the bridge inside a test: configs, a serve thread, waiting until records landed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import structlog
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from structlog.testing import capture_logs
from structlog.typing import EventDict

from bridge.config import Config, parse_config
from bridge.errors import LocalKafkaError
from bridge.local_kafka import BrokerSettings, LocalKafka
from bridge.serve import serve
from plateau_core import Store

REPO = Path(__file__).resolve().parents[1]


def make_config(
    kafka: str,
    data_dir: Path,
    topics: list[dict[str, Any]],
    *,
    group: str,
    storage: Mapping[str, Any] | None = None,
    roll: Mapping[str, Any] | None = None,
    kafka_extra: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Config:
    return parse_config(
        {
            **(extra or {}),
            "kafka": {"bootstrap_servers": kafka, "group_id": group, **(kafka_extra or {})},
            "storage": {"data_dir": str(data_dir), **(storage or {})},
            "defaults": {"roll": {"max_age": "300ms", **(roll or {})}},
            "topics": topics,
            "shutdown_timeout": "20s",
            # Tests run several serves at once: each takes a free port.
            "metrics": {"listen": "127.0.0.1:0"},
        }
    )


SERVE_STOP_WAIT_S = 60.0
LOG_TAIL = 30  # log events of the process kept to tell how serve ended


class _LogTail:
    """The process's last structlog events (serve's, when it runs in-process): a processor
    put in front of the configured ones while serve runs."""

    def __init__(self) -> None:
        self.events: deque[str] = deque(maxlen=LOG_TAIL)

    def __call__(self, _logger: Any, method: str, event_dict: EventDict) -> EventDict:
        fields = " ".join(f"{k}={v!r}" for k, v in event_dict.items() if k != "event")
        self.events.append(f"{method} {event_dict.get('event')} {fields}")
        return event_dict

    @contextmanager
    def recording(self) -> Iterator[None]:
        processors = structlog.get_config()["processors"]
        processors.insert(0, self)
        structlog.configure(processors=processors)
        try:
            yield
        finally:
            # capture_logs() in the block puts back a copy of the list: remove from that.
            current = structlog.get_config()["processors"]
            if self in current:
                current.remove(self)
                structlog.configure(processors=current)


@contextmanager
def serving(config: Config, workers: int = 1) -> Iterator[threading.Event]:
    """`plateau serve` on a thread; stopped (gracefully) when the block ends.

    When the block fails, its failure also tells how serve ended (its error or exit code,
    and the last log events): a serve that died early otherwise shows as a wait that timed
    out."""
    stop = threading.Event()
    outcome: dict[str, Any] = {}
    tail = _LogTail()

    def run() -> None:
        try:
            outcome["code"] = serve(config, workers, stop)
        except BaseException as exc:
            outcome["error"] = exc
        outcome["early"] = not stop.is_set()

    thread = threading.Thread(target=run, name="serve", daemon=True)
    with tail.recording():
        thread.start()
        try:
            yield stop
        except BaseException as failure:
            stop.set()
            thread.join(timeout=SERVE_STOP_WAIT_S)
            failure.add_note(_how_serve_ended(thread, outcome, tail))
            raise
        finally:
            stop.set()
            thread.join(timeout=SERVE_STOP_WAIT_S)
    assert not thread.is_alive(), f"serve did not stop within {SERVE_STOP_WAIT_S:.0f} s"
    if "error" in outcome:
        raise outcome["error"]


def serve_stopped_at_once(config: Config, timeout_s: float = 60.0) -> tuple[int, list[Any]]:
    """`plateau serve` told to stop as it starts, on a thread of its own (on the main thread
    serve would take pytest's signal handlers): its exit code and the events it logged."""
    stop = threading.Event()
    stop.set()
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(serve(config, stop=stop)))
    with capture_logs() as logs:
        thread.start()
        thread.join(timeout_s)
    assert not thread.is_alive(), f"serve did not stop within {timeout_s:.0f} s"
    assert len(codes) == 1, "serve raised instead of returning an exit code"
    return codes[0], logs


def _how_serve_ended(thread: threading.Thread, outcome: Mapping[str, Any], tail: _LogTail) -> str:
    if thread.is_alive():
        ended = f"serve was still running {SERVE_STOP_WAIT_S:.0f} s after it was told to stop"
    else:
        when = "on its own, before the block ended" if outcome["early"] else "after the block ended"
        error = outcome.get("error")
        ended = (
            f"serve returned {outcome['code']} {when}"
            if error is None
            else f"serve ended {when}, raising:\n" + "".join(traceback.format_exception(error))
        )
    events = "\n".join(f"  {line}" for line in tail.events) or "  (none)"
    return f"{ended}\nlast log events:\n{events}"


_LEADERLESS = frozenset(
    {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TIMED_OUT}
)


def end_offsets(kafka: str, topic: str, timeout_s: float = 30.0) -> dict[int, int]:
    """Each partition's end offset, retrying while a new partition has no leader yet."""
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "plateau-test-probe"})
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                metadata = consumer.list_topics(topic, timeout=10)
                return {
                    p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in metadata.topics[topic].partitions
                }
            except KafkaException as e:
                # Partitions just added show in metadata before their leader is elected.
                if e.args[0].code() not in _LEADERLESS or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


def wait_landed(
    data_dir: Path,
    topic: str,
    expected: Mapping[int, int],
    timeout_s: float = 60.0,
    manifest_url: str | None = None,
) -> None:
    """Until every partition's watermark reaches its expected end offset."""
    deadline = time.monotonic() + timeout_s
    seen: dict[int, int] = {}
    while time.monotonic() < deadline:
        with Store.open(data_dir, manifest_url=manifest_url) as store:
            seen = {s.partition: s.next_offset for s in store.spans(topic)}
        if all(seen.get(p, 0) >= end for p, end in expected.items()):
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic}: watermarks {seen}, expected {dict(expected)}")


def stored(data_dir: Path, topic: str, manifest_url: str | None = None) -> pa.Table:
    with Store.open(data_dir, manifest_url=manifest_url) as store:
        tables = [_with_partition(store, topic, s.partition) for s in store.spans(topic)]
    return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})


def _with_partition(store: Store, topic: str, partition: int) -> pa.Table:
    table = store.read(topic, partitions=[partition]).to_table()
    return table.append_column("partition", pa.array([partition] * table.num_rows, pa.int32()))


def committed(kafka: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        done = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in done}
    finally:
        consumer.close()


def write_config_file(
    path: Path,
    kafka: str,
    topic: str,
    group: str,
    *,
    metrics_listen: str = "127.0.0.1:0",
    kafka_extra: Mapping[str, Any] | None = None,
) -> None:
    """A config file for a `plateau serve` process; its store is `data` next to it."""
    path.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": kafka, "group_id": group, **(kafka_extra or {})},
                "storage": {"data_dir": "data"},
                "defaults": {"roll": {"max_rows": 3000, "max_age": "200ms"}},
                "topics": [{"source": topic}],
                "shutdown_timeout": "20s",
                "metrics": {"listen": metrics_listen},
            }
        )
    )


def plateau_command(
    *args: str,
    env: Mapping[str, str] | None = None,
    log_level: str | None = "WARNING",
    timeout_s: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """A `plateau` command run to its end in its own process, output captured.
    `log_level=None` keeps the command's default level."""
    level = [] if log_level is None else ["--log-level", log_level]
    return subprocess.run(
        [sys.executable, "-m", "bridge.cli", *level, *args],
        cwd=REPO,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def serve_process(
    config: Path, workers: int = 1, *, new_session: bool = False
) -> subprocess.Popen[str]:
    """`plateau serve` as its own process (stderr piped, for the test to read at the end);
    `new_session`: in a process group of its own, which a test may signal as a whole."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bridge.cli",
            "--log-level",
            "WARNING",
            "serve",
            "--config",
            str(config),
            "--workers",
            str(workers),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )


def with_metrics(config: Config, port: int, **extra: Any) -> Config:
    metrics = config.metrics.model_copy(update={"listen": f"127.0.0.1:{port}", **extra})
    return config.model_copy(update={"metrics": metrics})


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_readyz(
    port: int, check: Callable[[dict[str, Any]], bool], timeout_s: float = 60.0
) -> dict[str, Any]:
    """The first /readyz answer that passes `check`; its status code matches its body."""
    deadline = time.monotonic() + timeout_s
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            status, text = get(port, "/readyz")
        except OSError:  # serve is still starting: nothing listens yet
            time.sleep(0.2)
            continue
        body = json.loads(text)
        assert status == (200 if body["ready"] else 503), (status, body)
        if check(body):
            return body
        time.sleep(0.2)
    raise AssertionError(f"/readyz never matched; last answer: {body}")


def serve_until_landed(
    config: Path, data_dir: Path, topic: str, ends: Mapping[int, int], timeout_s: float = 120.0
) -> tuple[float, str]:
    """`plateau serve` as a process until every partition of `topic` reaches `ends`, then
    SIGTERM: (seconds from start to landed, its stderr). Fails unless it exits cleanly."""
    process = serve_process(config)
    started = time.monotonic()
    try:
        wait_landed(data_dir, topic, ends, timeout_s=timeout_s)
        seconds = time.monotonic() - started
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr[-3000:]
    return seconds, stderr


@contextmanager
def running_broker(
    work_dir: Path, settings: BrokerSettings | None = None, *, discard: bool = False
) -> Iterator[LocalKafka]:
    """A local broker for the block, stopped after it (killed when `discard`: its data goes
    with it, and a clean stop of a session's hundreds of partitions takes many seconds); the
    test fails (never skips) with the broker's reason when it cannot start."""
    broker = LocalKafka(work_dir, settings, tie_to_parent=True)
    try:
        broker.start()
    except LocalKafkaError as exc:
        pytest.fail(f"the local Kafka broker could not start: {exc}", pytrace=False)
    try:
        yield broker
    finally:
        if discard:
            broker.kill()
        else:
            broker.stop()
