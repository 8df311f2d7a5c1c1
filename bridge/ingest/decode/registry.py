"""Writer schemas by id from a Confluent-compatible schema registry, cached for the process.

Two failures are kept apart because they are handled apart: a schema the registry does not
have (`UnknownSchemaError`: the records that name it follow on_error), and a registry that
cannot answer (`RegistryUnavailableError`: the partition waits, nothing is skipped). While
the registry is unreachable, lookups fail at once until `retry_interval` has passed, so a
paused partition does not hold its thread in a connect timeout on every retry.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

import structlog
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from bridge.config.registry import SchemaRegistryConfig
from bridge.errors import BridgeError

log = structlog.get_logger(__name__)

NOT_FOUND = 404
# The registry's own "no such schema" (Confluent's code, which compatible registries keep):
# a 404 without it is a URL that reaches no registry, which skipping records must not follow.
SCHEMA_NOT_FOUND = 40403
# A referenced schema is looked up by subject and version: "no such subject", "no such
# version" (or, from some registries, "no such schema") are the registry's answer too.
REFERENCE_NOT_FOUND = frozenset({40401, 40402, SCHEMA_NOT_FOUND})


class RegistryUnavailableError(BridgeError):
    """The schema registry could not be asked (down, unreachable, refusing us, failing).

    `answers()` asks again for what failed (at most once per retry_interval): True once the
    registry answers, so a paused partition resumes only when decoding can go on.
    """

    def __init__(self, message: str, answers: Callable[[], bool] | None = None) -> None:
        super().__init__(message)
        self.answers = answers or (lambda: True)


class UnknownSchemaError(BridgeError):
    """The registry answered that it has no schema with this id."""


@dataclass(frozen=True)
class WriterSchema:
    """A schema records were written with, as the registry holds it."""

    id: int
    schema: Schema
    where: str  # "subject orders-value version 3", or "schema id 7" when the registry cannot say
    # Every schema it references, directly or through another, as (reference name, text),
    # each after those it references itself: what a reader parses first.
    references: tuple[tuple[str, str], ...] = ()

    @property
    def kind(self) -> str:
        return (self.schema.schema_type or "AVRO").upper()


class SchemaSource:
    """Writer schemas by id: fetched once, then served from memory (schema ids are immutable
    in a registry, so the cache never needs to expire)."""

    def __init__(self, config: SchemaRegistryConfig, client: SchemaRegistryClient) -> None:
        self.config = config
        self.client = client
        self._found: dict[int, WriterSchema] = {}
        self._down_until = 0.0
        self._down_reason = ""
        self._lock = threading.Lock()

    def get(self, schema_id: int, fmt: str | None = None) -> WriterSchema:
        """The writer schema `schema_id`; raises UnknownSchemaError or
        RegistryUnavailableError. `fmt`: the registry's rendering of it (protobuf needs
        "serialized", a FileDescriptorProto, which Python can read without protoc)."""
        found = self._found.get(schema_id)
        if found is not None:
            return found
        with self._lock:
            return self._fetch(schema_id, fmt)

    def cached(self, schema_id: int) -> bool:
        return schema_id in self._found

    def prefetch(self, schema_id: int, fmt: str | None = None) -> None:
        """Fetch a schema into memory if the registry answers; what it cannot answer is
        left for `get` to report (fast while the registry is marked down)."""
        with suppress(UnknownSchemaError, RegistryUnavailableError):
            self.get(schema_id, fmt)

    def _fetch(self, schema_id: int, fmt: str | None) -> WriterSchema:
        found = self._found.get(schema_id)
        if found is not None:
            return found
        if time.monotonic() < self._down_until:
            raise RegistryUnavailableError(self._down_reason, self._prober(schema_id, fmt))
        try:
            schema = self.client.get_schema(schema_id, fmt=fmt)
            # Fetched with it, so that what holds the schema in memory needs nothing more
            # from the registry to read its records (the Kafka API decodes on its event loop).
            references = self._references(schema_id, schema, fmt)
            where = self._where(schema_id)
        except UnknownSchemaError:
            raise
        except SchemaRegistryError as exc:
            if exc.http_status_code == NOT_FOUND and exc.error_code == SCHEMA_NOT_FOUND:
                # Not remembered: a registry that lags behind its producers has it later.
                raise UnknownSchemaError(
                    f"schema id {schema_id} is not in the schema registry ({exc.error_message})"
                ) from None
            detail = f"HTTP {exc.http_status_code}: {exc.error_message}"
            raise self._down(schema_id, fmt, detail) from None
        except Exception as exc:  # any transport failure means "not reachable"
            raise self._down(schema_id, fmt, f"{type(exc).__name__}: {exc}") from None
        writer = WriterSchema(schema_id, schema, where, references)
        self._found[schema_id] = writer
        log.info("schema_fetched", schema_id=schema_id, kind=writer.kind, where=where)
        return writer

    def _references(
        self, schema_id: int, schema: Schema, fmt: str | None
    ) -> tuple[tuple[str, str], ...]:
        """What `schema` references, followed through the schemas it references, as
        Confluent's own deserializers resolve them (soft-deleted versions included: records
        written with them are still read)."""
        found: dict[str, str] = {}
        self._follow(schema_id, schema, fmt, found, set())
        return tuple(found.items())

    def _follow(
        self,
        schema_id: int,
        schema: Schema,
        fmt: str | None,
        found: dict[str, str],
        visited: set[str],
    ) -> None:
        for ref in schema.references or ():
            if ref.name is None or ref.subject is None or ref.version is None:
                continue  # make_reader refuses the schema, naming it
            if ref.name in visited:
                continue
            visited.add(ref.name)
            try:
                registered = self.client.get_version(ref.subject, ref.version, True, fmt)
            except SchemaRegistryError as exc:
                if exc.http_status_code == NOT_FOUND and exc.error_code in REFERENCE_NOT_FOUND:
                    raise UnknownSchemaError(
                        f"schema id {schema_id} references subject {ref.subject} version "
                        f"{ref.version}, which is not in the schema registry "
                        f"({exc.error_message})"
                    ) from None
                raise
            self._follow(schema_id, registered.schema, fmt, found, visited)
            found.setdefault(ref.name, registered.schema.schema_str or "")

    def _where(self, schema_id: int) -> str:
        """The subject and version of a schema, for error messages; registries that do not
        serve this lookup are named by id only."""
        try:
            versions = self.client.get_schema_versions(schema_id)
        except SchemaRegistryError:
            return f"schema id {schema_id}"
        if not versions:
            return f"schema id {schema_id}"
        first = versions[0]
        return f"schema id {schema_id} (subject {first.subject} version {first.version})"

    def _prober(self, schema_id: int, fmt: str | None) -> Callable[[], bool]:
        def answers() -> bool:
            try:
                self.get(schema_id, fmt)
            except UnknownSchemaError:
                return True  # an answer all the same: the records follow on_error
            except RegistryUnavailableError:
                return False
            return True

        return answers

    def _down(self, schema_id: int, fmt: str | None, detail: str) -> RegistryUnavailableError:
        self._down_until = time.monotonic() + self.config.retry_interval
        self._down_reason = (
            f"schema registry {self.config.shown_url} unreachable fetching schema id "
            f"{schema_id}: "
            f"{detail}"
        )
        log.warning(
            "schema_registry_unreachable",
            url=self.config.shown_url,
            schema_id=schema_id,
            error=detail,
        )
        return RegistryUnavailableError(self._down_reason, self._prober(schema_id, fmt))


_sources: dict[str, SchemaSource] = {}
_sources_lock = threading.Lock()


def schema_source(config: SchemaRegistryConfig) -> SchemaSource:
    """One source per registry settings in a process: every partition and worker shares its
    cache, so a schema is fetched once."""
    key = repr(sorted((k, str(v)) for k, v in config.client_settings().items()))
    with _sources_lock:
        found = _sources.get(key)
        if found is None:
            found = SchemaSource(config, SchemaRegistryClient(config.client_settings()))
            _sources[key] = found
        return found


def forget_schema_sources() -> None:
    """Drop every cached source: for a registry replaced by another at the same address,
    whose schema ids mean other schemas (each test starts its own on a free port, and the
    system may hand the same port out again)."""
    with _sources_lock:
        _sources.clear()
