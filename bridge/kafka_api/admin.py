"""The APIs around Produce: ApiVersions, Metadata, InitProducerId, CreateTopics,
DescribeCluster and DescribeConfigs. plateau is a cluster of one node (id 0) that leads
every partition."""

from __future__ import annotations

import asyncio
import base64
import collections
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

import structlog
from kio.schema.errors import ErrorCode

from bridge.kafka_api.daemon_calls import off_loop
from bridge.kafka_api.failures import creation_error, unfinished
from bridge.kafka_api.protocol import api_versions
from bridge.kafka_api.sink import ProduceSink
from bridge.kafka_api.topics import TopicNameError

log = structlog.get_logger(__name__)

NODE_ID = 0
_ZERO_ID = uuid.UUID(int=0)
# Topic configs CreateTopics may carry: the values that say what plateau does anyway.
_AS_PLATEAU_DOES: dict[str, tuple[str, ...]] = {
    "cleanup.policy": ("delete",),
    "message.timestamp.type": ("CreateTime",),
}
# DescribeConfigs' config_source values.
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


class Created(NamedTuple):
    """One topic's answer to CreateTopics."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    partitions: int = -1  # when created (or valid, with validate_only)


def _outcome(topic: str, creating: asyncio.Future[int]) -> Created:
    # Kafka's answer for a topic whose creation outlasts the request's timeout (or any
    # creation, with a timeout of 0) is REQUEST_TIMED_OUT.
    still = f"topic {topic!r} is still being created; it is listed once its partitions are open"
    answer = unfinished(topic, creating, still)
    return Created(partitions=creating.result()) if answer is None else Created(*answer)


def topic_id(topic: str) -> uuid.UUID:
    """A topic's id, the same on every start (Kafka's are random; nothing here relies on
    them being so)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"plateau-topic:{topic}")


class AdminHandler:
    def __init__(self, sink: ProduceSink, host: str, port: int) -> None:
        self.sink = sink
        self.host = host
        self.port = port
        self.topics = sink.topics
        store_id = uuid.uuid5(uuid.NAMESPACE_URL, f"plateau-store:{sink.store.data_dir}")
        self.cluster_id = base64.urlsafe_b64encode(store_id.bytes).decode().rstrip("=")

    def api_versions(self, _body: Any) -> dict[str, Any]:
        return {"error_code": ErrorCode.none, "api_keys": api_versions()}

    async def metadata(
        self, body: Any, version: int, auto_create: bool, allowed: Callable[[str], bool]
    ) -> dict[str, Any]:
        known = [*self.topics.partitions, *self.topics.unopened]
        # The topics asked for, in order: (name, the id it was asked by, None: by name).
        asked: list[tuple[str | None, uuid.UUID | None]]
        if body.topics is None or (version == 0 and not body.topics):
            # As Kafka lists them under ACLs: a user sees the topics it may write, and
            # learns nothing of the others.
            asked = [(t, None) for t in sorted(known) if allowed(t)]
        else:
            by_id = {topic_id(t): t for t in known}
            # A null name with the zero id (decoded as None) is asked by id too: Kafka
            # answers it UNKNOWN_TOPIC_ID.
            asked = [
                (t.name, None)
                if t.name is not None
                else (by_id.get(t.topic_id), t.topic_id or _ZERO_ID)
                for t in body.topics
            ]
        allow = auto_create and getattr(body, "allow_auto_topic_creation", True)
        refused: dict[str, ErrorCode] = {}
        for name, by_id_of in asked:
            # A topic whose partitions did not open at start is opened again, created or not;
            # none is created for an id (Kafka's rule).
            create = by_id_of is None and (allow or name in self.topics.unopened)
            if create and name is not None and allowed(name) and name not in self.topics.partitions:
                paused = self.sink.creation.paused(name)
                try:
                    await self.sink.creation.create(name, None, "metadata")
                except Exception as exc:
                    # This topic's answer: the request's others still get theirs.
                    refused[name], message = creation_error(name, exc)
                    if not paused:  # logged once per attempt, not per client's refresh
                        log.warning("topic_refused", topic=name, error=message)
        topics = [
            self._asked(name, by_id_of, version, allowed, refused) for name, by_id_of in asked
        ]
        return {
            "brokers": [{"node_id": NODE_ID, "host": self.host, "port": self.port}],
            "cluster_id": self.cluster_id,
            "controller_id": NODE_ID,
            "topics": topics,
        }

    def _asked(
        self,
        name: str | None,
        by_id: uuid.UUID | None,
        version: int,
        allowed: Callable[[str], bool],
        refused: dict[str, ErrorCode],
    ) -> dict[str, Any]:
        """One topic's Metadata answer. Asked by an id (v10 and later), Kafka answers one it
        does not know UNKNOWN_TOPIC_ID, and one not allowed TOPIC_AUTHORIZATION_FAILED,
        without a name; before v12 a name is not optional, and ids are refused."""
        if by_id is not None and (version < 12 or name is None or not allowed(name)):
            if version < 12:
                error = ErrorCode.invalid_request
            elif name is None:
                error = ErrorCode.unknown_topic_id
            else:
                error = ErrorCode.topic_authorization_failed
            return {"name": "" if version < 12 else None, "topic_id": by_id, "error_code": error}
        assert name is not None
        if not allowed(name):
            return {"name": name, "error_code": ErrorCode.topic_authorization_failed}
        return self._topic_metadata(name, refused.get(name))

    def _topic_metadata(self, name: str, refused: ErrorCode | None) -> dict[str, Any]:
        if refused is None and name in self.topics.unopened:
            # Asked by its id, nothing tried to open it: the error it has.
            refused = ErrorCode.kafka_storage_error
        if refused is not None:
            if name in self.topics.unopened:
                # A topic that exists: its id, as clients asking by it again expect.
                return {"name": name, "topic_id": topic_id(name), "error_code": refused}
            return {"name": name, "error_code": refused}
        count = self.topics.partitions.get(name)
        if count is None:
            return {
                "name": name,
                "topic_id": topic_id(name),
                "error_code": ErrorCode.unknown_topic_or_partition,
            }
        return {
            "name": name,
            "topic_id": topic_id(name),
            "error_code": ErrorCode.none,
            "is_internal": False,
            "partitions": [
                {
                    "error_code": ErrorCode.none,
                    "partition_index": p,
                    "leader_id": NODE_ID,
                    "leader_epoch": 0,
                    "replica_nodes": [NODE_ID],
                    "isr_nodes": [NODE_ID],
                    "offline_replicas": [],
                }
                for p in range(count)
            ],
        }

    async def init_producer_id(self, body: Any) -> dict[str, Any]:
        if body.transactional_id is not None:
            return {
                "error_code": ErrorCode.transactional_id_authorization_failed,
                "producer_id": -1,
                "producer_epoch": -1,
            }
        # Kafka's rule without a transactional id: a new id every time, even when the
        # producer names its current one (librdkafka does after an error). Bumping the
        # epoch of an id it names would let it take one this store never handed out, or one
        # handed to another producer since.
        # A manifest write, which waits behind any other (a seal's commit, another
        # process's lock): off the event loop, or every connection waits with it.
        producer_id = await off_loop(self.sink.store.manifest.next_producer_id)
        epoch = 0
        log.info("producer_id_assigned", producer_id=producer_id, epoch=epoch)
        return {"error_code": ErrorCode.none, "producer_id": producer_id, "producer_epoch": epoch}

    async def create_topics(self, body: Any, allowed: Callable[[str], bool]) -> dict[str, Any]:
        named = collections.Counter(topic.name for topic in body.topics)
        answers: list[Created | asyncio.Future[int]] = []
        for topic in body.topics:
            refusal: Created | None
            if named[topic.name] > 1:
                # Kafka's answer: neither entry is created.
                refusal = Created(
                    ErrorCode.invalid_request, f"topic {topic.name!r} is listed more than once"
                )
            elif not allowed(topic.name):
                refusal = Created(
                    ErrorCode.topic_authorization_failed, f"not allowed: {topic.name}"
                )
            else:
                refusal = self._refusal(topic)
            if refusal is not None:
                answers.append(refusal)
                continue
            wanted = topic.num_partitions if topic.num_partitions > 0 else None
            if body.validate_only:
                answers.append(Created(partitions=wanted or self.sink.api.default_partitions))
            else:
                answers.append(self.sink.creation.start(topic.name, wanted, "create_topics"))
        creating = [a for a in answers if isinstance(a, asyncio.Future)]
        timeout_s = body.timeout.total_seconds()
        if creating and timeout_s > 0:
            # As Kafka: answered by the request's timeout, the creations going on after it
            # (thousands of partitions take longer than the Java admin client's 30 s).
            await asyncio.wait(creating, timeout=timeout_s)
        results = []
        for topic, answer in zip(body.topics, answers, strict=True):
            done = answer if isinstance(answer, Created) else _outcome(topic.name, answer)
            ok = done.error is ErrorCode.none
            results.append(
                {
                    "name": topic.name,
                    "topic_id": topic_id(topic.name),
                    "error_code": done.error,
                    "error_message": done.message,
                    "num_partitions": done.partitions if ok else -1,
                    "replication_factor": 1 if ok else -1,
                    "configs": [],
                }
            )
        return {"topics": results}

    def _refusal(self, topic: Any) -> Created | None:
        """Why CreateTopics does not create `topic`, or None."""
        name = topic.name
        if name in self.topics.partitions or self.sink.creation.creating(name):
            return Created(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        if topic.replication_factor not in (-1, 1):
            return Created(
                ErrorCode.invalid_replication_factor,
                "plateau is one node: replication_factor can be 1 (or -1)",
            )
        if topic.assignments:
            return Created(ErrorCode.invalid_request, "plateau places partitions itself")
        if not (topic.num_partitions == -1 or 1 <= topic.num_partitions <= 10_000):
            return Created(ErrorCode.invalid_partitions, "num_partitions must be 1..10000 or -1")
        refused = [
            f"{c.name}={c.value}"
            for c in topic.configs
            if c.value not in _AS_PLATEAU_DOES.get(c.name, ())
        ]
        if refused:
            return Created(
                ErrorCode.invalid_config,
                f"plateau does not take topic configs here ({', '.join(refused)}); a topic's "
                "settings go in its config file's topics section",
            )
        try:
            self.topics.check_name(name)
        except TopicNameError as exc:
            return Created(ErrorCode.invalid_topic_exception, str(exc))
        return None

    def describe_cluster(self, _body: Any) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.none,
            "cluster_id": self.cluster_id,
            "controller_id": NODE_ID,
            "brokers": [{"broker_id": NODE_ID, "host": self.host, "port": self.port}],
        }

    def describe_configs(self, body: Any, allowed: Callable[[str], bool]) -> dict[str, Any]:
        return {"results": [self._describe(resource, allowed) for resource in body.resources]}

    def _describe(self, resource: Any, allowed: Callable[[str], bool]) -> dict[str, Any]:
        kind, name = resource.resource_type, resource.resource_name
        wanted = resource.configuration_keys
        base = {"resource_type": kind, "resource_name": name}
        if kind == TOPIC_RESOURCE:
            if not allowed(name):
                # Before the existence check, as Kafka under ACLs: a user learns nothing of
                # the topics it may not write, not even that they exist.
                return {
                    **base,
                    "error_code": ErrorCode.topic_authorization_failed,
                    "error_message": f"not allowed: {name}",
                }
            if name not in self.topics.partitions:
                return {
                    **base,
                    "error_code": ErrorCode.unknown_topic_or_partition,
                    "error_message": f"no topic {name!r}",
                }
            configs = self._topic_configs(name)
        elif kind == BROKER_RESOURCE:
            configs = {"message.max.bytes": (str(self.sink.api.message_max_bytes), 4)}
        else:
            return {
                **base,
                "error_code": ErrorCode.invalid_request,
                "error_message": f"resource type {kind} is not described",
            }
        return {
            **base,
            "error_code": ErrorCode.none,
            "configs": [
                {
                    "name": key,
                    "value": value,
                    "read_only": True,
                    "config_source": source,
                    "is_sensitive": False,
                    "synonyms": [],
                }
                for key, (value, source) in sorted(configs.items())
                if wanted is None or key in wanted
            ],
        }

    def _topic_configs(self, topic: str) -> dict[str, tuple[str, int]]:
        mapping = self.topics.mapping(topic)
        source = DYNAMIC_TOPIC_CONFIG if self.topics.configured(topic) else DEFAULT_CONFIG
        retention = self.sink.config.retention_policy(mapping)
        stamp = "LogAppendTime" if mapping.timestamp == "log_append_time" else "CreateTime"
        return {
            "cleanup.policy": ("delete", DEFAULT_CONFIG),
            "message.timestamp.type": (stamp, source),
            "max.message.bytes": (str(self.sink.api.message_max_bytes), STATIC_BROKER_CONFIG),
            "retention.ms": (
                str(int(retention.max_age_s * 1000)) if retention.max_age_s else "-1",
                source,
            ),
            "retention.bytes": (str(retention.max_bytes or -1), source),
        }
