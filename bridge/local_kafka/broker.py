"""A single-node Apache Kafka broker (KRaft, combined broker+controller) run from its jars.

It serves development and the test suite: it listens on 127.0.0.1 only, on free ports
picked at start, and keeps its data in one folder so that a stopped broker can be started
again on the same ports with the same data. With `BrokerSettings.security` it also serves
SASL_SSL (and SASL_PLAINTEXT) listeners; see bridge.local_kafka.security.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import structlog

from bridge.errors import LocalKafkaError
from bridge.local_kafka.jars import DEFAULT_KAFKA_VERSION, kafka_libs
from bridge.local_kafka.processes import (
    broker_answers,
    die_with_parent,
    free_port,
    kill_pid,
    pid_alive,
    stop_pid,
)
from bridge.local_kafka.security import (
    CREDENTIALS_FILE,
    SECURITY_DIR,
    SecureEndpoints,
    SecurityMaterial,
    SecuritySettings,
    prepare,
    write_private,
)

log = structlog.get_logger(__name__)

STATE_FILE = "broker.json"
LOG_FILE = "broker.log"
_PORT_ATTEMPTS = 3
_PORT_TAKEN = "Address already in use"  # Kafka's log line when a listener cannot bind


@dataclass(frozen=True)
class BrokerSettings:
    """How a local broker is run; the defaults suit a 2-core test machine."""

    kafka_version: str = DEFAULT_KAFKA_VERSION
    cache_dir: Path | None = None
    heap: str = "512m"
    start_timeout_s: float = 90.0
    stop_timeout_s: float = 30.0
    # Extra server.properties entries, applied last (they override anything above).
    properties: Mapping[str, str] = field(default_factory=dict)
    # SASL_SSL (and SASL_PLAINTEXT) listeners next to PLAINTEXT; None: PLAINTEXT only.
    security: SecuritySettings | None = None


@dataclass(frozen=True)
class BrokerState:
    """What `plateau kafka status/stop` need to find a broker started by another process."""

    pid: int
    bootstrap_servers: str
    controller_port: int
    kafka_version: str
    started_at: float
    secure_bootstrap_servers: str | None = None

    def write(self, work_dir: Path) -> None:
        # Whole or not at all: a file cut short would hide the broker's pid from `stop`.
        path = work_dir / STATE_FILE
        temp = path.with_suffix(".tmp")
        temp.write_text(json.dumps(self.__dict__, indent=2) + "\n")
        temp.replace(path)

    @classmethod
    def read(cls, work_dir: Path) -> BrokerState | None:
        path = work_dir / STATE_FILE
        if not path.exists():
            return None
        try:
            raw = json.loads(path.read_text())
            return cls(
                pid=int(raw["pid"]),
                bootstrap_servers=str(raw["bootstrap_servers"]),
                controller_port=int(raw["controller_port"]),
                kafka_version=str(raw["kafka_version"]),
                started_at=float(raw["started_at"]),
                secure_bootstrap_servers=raw.get("secure_bootstrap_servers"),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise LocalKafkaError(
                f"{path} cannot be read ({type(exc).__name__}: {exc}); if no broker runs "
                f"from {work_dir}, delete it"
            ) from None


class LocalKafka:
    """One local broker whose configuration, data and log live under `work_dir`."""

    def __init__(
        self,
        work_dir: Path,
        settings: BrokerSettings | None = None,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        tie_to_parent: bool = False,
    ) -> None:
        self.work_dir = work_dir.resolve()
        self.settings = settings or BrokerSettings()
        self.port = port
        self.controller_port = controller_port
        # When the owning process dies (a test run killed hard), the kernel kills the broker
        # too, so no java process is left behind.
        self.tie_to_parent = tie_to_parent
        self.sasl_ssl_port: int | None = None
        self.sasl_plaintext_port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._security: SecurityMaterial | None = None
        self._log_start: dict[Path, int] = {}

    @property
    def log_path(self) -> Path:
        return self.work_dir / LOG_FILE

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise LocalKafkaError("the broker has not been started yet")
        return f"127.0.0.1:{self.port}"

    @property
    def security(self) -> SecureEndpoints:
        """Where and how clients reach the secured listeners (needs `settings.security`)."""
        material = self._security
        if material is None or self.sasl_ssl_port is None:
            raise LocalKafkaError("the broker has no secured listeners, or has not started yet")
        return SecureEndpoints(
            sasl_ssl_bootstrap=f"127.0.0.1:{self.sasl_ssl_port}",
            sasl_plaintext_bootstrap=None
            if self.sasl_plaintext_port is None
            else f"127.0.0.1:{self.sasl_plaintext_port}",
            ca_file=material.ca_file,
            username=material.username,
            password=material.password,
        )

    @property
    def pid(self) -> int | None:
        return self._pid

    def __enter__(self) -> LocalKafka:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> str:
        """Start the broker (formatting its storage on first use); return bootstrap servers."""
        if self._pid is not None and pid_alive(self._pid):
            return self.bootstrap_servers
        java = shutil.which("java")
        if java is None:
            raise LocalKafkaError("java is not on PATH; the local Kafka broker needs Java 17+")
        libs = kafka_libs(self.settings.kafka_version, self.settings.cache_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        # Ports picked here are free when picked, not when the broker binds them: another
        # process (a second test session, a client's outgoing connection) may take one in
        # between. Such a start is tried again on other ports; ports given are kept.
        picked = self.port is None and self.controller_port is None
        for attempt in range(1, _PORT_ATTEMPTS):
            try:
                return self._start(java, libs)
            except LocalKafkaError as exc:
                if not picked or _PORT_TAKEN not in str(exc):
                    raise
                log.warning(
                    "kafka_port_taken",
                    ports=[self.port, self.controller_port, self.sasl_ssl_port],
                    attempt=attempt,
                )
                self.port = self.controller_port = None
                self.sasl_ssl_port = self.sasl_plaintext_port = None
        return self._start(java, libs)  # the last attempt: its failure is the start's

    def _start(self, java: str, libs: Path) -> str:
        self.port = self.port or free_port()
        self.controller_port = self.controller_port or free_port()
        formatted = (self.data_dir / "meta.properties").exists()
        self._prepare_security(formatted)
        properties = self._write_config()
        classpath = f"{libs}/*"
        log4j = f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}"
        if not formatted:
            self._format(java, classpath, log4j, properties)
        cmd = [
            java,
            f"-Xmx{self.settings.heap}",
            f"-Xms{self.settings.heap}",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            log4j,
            "-cp",
            classpath,
            "kafka.Kafka",
            str(properties),
        ]
        started = time.monotonic()
        # The log and stdout files are kept across starts: a failure reports what this
        # start wrote, not an earlier start's errors.
        self._log_start = {path: _size(path) for path in self._log_files()}
        with (self.work_dir / "broker.stdout").open("ab") as out:
            self._process = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent if self.tie_to_parent else None,  # noqa: PLW1509
            )
        self._pid = self._process.pid
        BrokerState(
            pid=self._pid,
            bootstrap_servers=self.bootstrap_servers,
            controller_port=self.controller_port,
            kafka_version=self.settings.kafka_version,
            started_at=time.time(),
            secure_bootstrap_servers=self.security.sasl_ssl_bootstrap if self._security else None,
        ).write(self.work_dir)
        self._wait_ready(started)
        log.info(
            "kafka_started",
            bootstrap_servers=self.bootstrap_servers,
            pid=self._pid,
            seconds=round(time.monotonic() - started, 2),
        )
        return self.bootstrap_servers

    def stop(self) -> None:
        """SIGTERM, then SIGKILL once the stop deadline passes. Safe to call twice."""
        pid = self._pid
        if pid is None:
            return
        stop_pid(pid, self.settings.stop_timeout_s, self._process)
        self._forget(pid, "kafka_stopped")

    def kill(self) -> None:
        """SIGKILL, no clean shutdown: for a broker whose data is thrown away with it (a
        test session's), whose shutdown of hundreds of partitions takes many seconds."""
        pid = self._pid
        if pid is None:
            return
        kill_pid(pid, self._process)
        self._forget(pid, "kafka_killed")

    def _forget(self, pid: int, event: str) -> None:
        """The broker process is gone: nothing of it is held or recorded any more."""
        self._pid = None
        self._process = None
        (self.work_dir / STATE_FILE).unlink(missing_ok=True)
        log.info(event, bootstrap_servers=self.bootstrap_servers, pid=pid)

    def running(self) -> bool:
        return self._pid is not None and pid_alive(self._pid) and self._exit_code() is None

    def log_tail(self, lines: int = 60) -> str:
        """The last lines of the broker's log and stdout, after its first ERROR lines: a
        broker that fails to start logs its shutdown after the cause, often more than
        `lines` of it."""
        chunks = []
        for path in self._log_files():
            if path.exists():
                with path.open("rb") as file:
                    file.seek(self._log_start.get(path, 0))
                    text = file.read().decode(errors="replace").splitlines()
                tail = text[-lines:]
                # Each ERROR line with the next, where Java puts the exception's message.
                first = [i for i, line in enumerate(text[:-lines]) if " ERROR " in line][:5]
                errors = [line for i in first for line in text[i : i + 2]]
                shown = [*errors, "...", *tail] if errors else tail
                chunks.append(f"--- {path} ---\n" + "\n".join(shown))
        return "\n".join(chunks) or f"(no broker log under {self.work_dir})"

    def _log_files(self) -> tuple[Path, Path]:
        return self.log_path, self.work_dir / "broker.stdout"

    def _exit_code(self) -> int | None:
        return None if self._process is None else self._process.poll()

    def _wait_ready(self, started: float) -> None:
        deadline = started + self.settings.start_timeout_s
        while time.monotonic() < deadline:
            code = self._exit_code()
            if code is not None:
                self._pid = None
                self._process = None
                (self.work_dir / STATE_FILE).unlink(missing_ok=True)
                raise LocalKafkaError(
                    f"the Kafka broker exited with code {code} while starting\n{self.log_tail()}"
                )
            if broker_answers(self.bootstrap_servers):
                return
            time.sleep(0.25)
        self.stop()
        raise LocalKafkaError(
            f"the Kafka broker did not answer on {self.bootstrap_servers} within "
            f"{self.settings.start_timeout_s:.0f}s\n{self.log_tail()}"
        )

    def _prepare_security(self, formatted: bool) -> None:
        security = self.settings.security
        if security is None:
            return
        if formatted and not (self.work_dir / SECURITY_DIR / CREDENTIALS_FILE).exists():
            # SCRAM users are created when the storage is formatted, so they cannot be added
            # to a broker folder that was first started without security.
            raise LocalKafkaError(
                f"{self.work_dir} was formatted without security; use a fresh broker folder"
            )
        self._security = prepare(self.work_dir, security)
        self.sasl_ssl_port = self.sasl_ssl_port or free_port()
        if security.sasl_plaintext:
            self.sasl_plaintext_port = self.sasl_plaintext_port or free_port()

    def _format(self, java: str, classpath: str, log4j: str, properties: Path) -> None:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        cmd = [java, log4j, "-cp", classpath, "kafka.tools.StorageTool", "format"]
        # `--cluster-id=` form: a random id may start with "-" and read as an option.
        cmd += [f"--cluster-id={cluster_id}", f"--config={properties}"]
        if self._security is not None:
            cmd += ["--add-scram", self._security.scram_argument()]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            output = done.stdout + done.stderr
            if self._security is not None:
                output = output.replace(self._security.password, "***")
            raise LocalKafkaError(
                f"formatting KRaft storage in {self.data_dir} failed (exit {done.returncode}):\n"
                f"{output}"
            )

    def _write_config(self) -> Path:
        # Each client listener is named after its protocol.
        client_listeners: dict[str, int | None] = {"PLAINTEXT": self.port}
        if self.sasl_ssl_port is not None:
            client_listeners["SASL_SSL"] = self.sasl_ssl_port
        if self.sasl_plaintext_port is not None:
            client_listeners["SASL_PLAINTEXT"] = self.sasl_plaintext_port
        protocols = {name: name for name in client_listeners} | {"CONTROLLER": "PLAINTEXT"}
        advertised = ",".join(f"{n}://127.0.0.1:{p}" for n, p in client_listeners.items())
        props: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"{advertised},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(
                f"{name}:{protocol}" for name, protocol in protocols.items()
            ),
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Tests form consumer groups constantly; the default 3 s delay would dominate.
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
        }
        if self._security is not None:
            secured = [n for n in client_listeners if n != "PLAINTEXT"]
            props.update(self._security.server_properties(secured))
        props.update(self.settings.properties)
        path = self.work_dir / "server.properties"
        # Owner-only: with PLAIN enabled it holds the user's password.
        write_private(path, "".join(f"{k}={v}\n" for k, v in props.items()))
        (self.work_dir / "log4j2.properties").write_text(_LOG4J_TEMPLATE.format(log=self.log_path))
        return path


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


_LOG4J_TEMPLATE = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
"""
