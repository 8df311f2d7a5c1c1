"""The APIs around Produce: ApiVersions, Metadata, InitProducerId, CreateTopics,
DescribeCluster and DescribeConfigs. plateau is a cluster of one node (id 0) that leads
every partition."""

from __future__ import annotations

import base64
import collections
import uuid
from collections.abc import Callable
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from bridge.kafka_api.protocol import api_versions
from bridge.kafka_api.sink import ProduceSink, creation_error
from bridge.kafka_api.topics import TopicNameError

log = structlog.get_logger(__name__)

NODE_ID = 0
# Topic configs CreateTopics may carry: the values that say what plateau does anyway.
_AS_PLATEAU_DOES: dict[str, tuple[str, ...]] = {
    "cleanup.policy": ("delete",),
    "message.timestamp.type": ("CreateTime",),
}
# DescribeConfigs' config_source values.
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


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
        if body.topics is None or (version == 0 and not body.topics):
            # As Kafka lists them under ACLs: a user sees the topics it may write, and
            # learns nothing of the others.
            names = sorted(t for t in self.topics.partitions if allowed(t))
        else:
            by_id = {topic_id(t): t for t in self.topics.partitions}
            names = [
                t.name if getattr(t, "name", None) else by_id.get(t.topic_id, "")
                for t in body.topics
            ]
        allow = auto_create and getattr(body, "allow_auto_topic_creation", True)
        refused: dict[str, ErrorCode] = {}
        for name in names:
            if allow and allowed(name) and name not in self.topics.partitions:
                try:
                    await self.sink.create_topic(name, None, "metadata")
                except Exception as exc:
                    # This topic's answer: the request's others still get theirs.
                    refused[name], message = creation_error(name, exc)
                    log.warning("topic_refused", topic=name, error=message)
        topics = [
            self._topic_metadata(name, refused.get(name))
            if allowed(name)
            else {"name": name, "error_code": ErrorCode.topic_authorization_failed}
            for name in names
        ]
        return {
            "brokers": [{"node_id": NODE_ID, "host": self.host, "port": self.port}],
            "cluster_id": self.cluster_id,
            "controller_id": NODE_ID,
            "topics": topics,
        }

    def _topic_metadata(self, name: str, refused: ErrorCode | None) -> dict[str, Any]:
        if refused is not None:
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

    def init_producer_id(self, body: Any) -> dict[str, Any]:
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
        producer_id, epoch = self.sink.store.manifest.next_producer_id(), 0
        log.info("producer_id_assigned", producer_id=producer_id, epoch=epoch)
        return {"error_code": ErrorCode.none, "producer_id": producer_id, "producer_epoch": epoch}

    async def create_topics(self, body: Any, allowed: Callable[[str], bool]) -> dict[str, Any]:
        results = []
        named = collections.Counter(topic.name for topic in body.topics)
        for topic in body.topics:
            error: ErrorCode
            message: str | None
            if named[topic.name] > 1:
                # Kafka's answer: neither entry is created.
                error, message, count = (
                    ErrorCode.invalid_request,
                    f"topic {topic.name!r} is listed more than once",
                    -1,
                )
            elif not allowed(topic.name):
                error, message, count = (
                    ErrorCode.topic_authorization_failed,
                    f"not allowed: {topic.name}",
                    -1,
                )
            else:
                error, message, count = await self._create(topic, body.validate_only)
            results.append(
                {
                    "name": topic.name,
                    "topic_id": topic_id(topic.name),
                    "error_code": error,
                    "error_message": message,
                    "num_partitions": count if error is ErrorCode.none else -1,
                    "replication_factor": 1 if error is ErrorCode.none else -1,
                    "configs": [],
                }
            )
        return {"topics": results}

    async def _create(self, topic: Any, validate_only: bool) -> tuple[ErrorCode, str | None, int]:
        name = topic.name
        if name in self.topics.partitions or self.sink.creating(name):
            return ErrorCode.topic_already_exists, f"topic {name!r} already exists", -1
        if topic.replication_factor not in (-1, 1):
            return (
                ErrorCode.invalid_replication_factor,
                "plateau is one node: replication_factor can be 1 (or -1)",
                -1,
            )
        if topic.assignments:
            return ErrorCode.invalid_request, "plateau places partitions itself", -1
        if not (topic.num_partitions == -1 or 1 <= topic.num_partitions <= 10_000):
            return ErrorCode.invalid_partitions, "num_partitions must be 1..10000 or -1", -1
        refused = [
            f"{c.name}={c.value}"
            for c in topic.configs
            if c.value not in _AS_PLATEAU_DOES.get(c.name, ())
        ]
        if refused:
            return (
                ErrorCode.invalid_config,
                f"plateau does not take topic configs here ({', '.join(refused)}); a topic's "
                "settings go in its config file's topics section",
                -1,
            )
        try:
            self.topics.check_name(name)
        except TopicNameError as exc:
            return ErrorCode.invalid_topic_exception, str(exc), -1
        wanted = topic.num_partitions if topic.num_partitions > 0 else None
        if validate_only:
            return ErrorCode.none, None, wanted or self.sink.api.default_partitions
        try:
            count = await self.sink.create_topic(name, wanted, "create_topics")
        except Exception as exc:
            return (*creation_error(name, exc), -1)
        return ErrorCode.none, None, count

    def describe_cluster(self, _body: Any) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.none,
            "cluster_id": self.cluster_id,
            "controller_id": NODE_ID,
            "brokers": [{"broker_id": NODE_ID, "host": self.host, "port": self.port}],
        }

    def describe_configs(self, body: Any) -> dict[str, Any]:
        return {"results": [self._describe(resource) for resource in body.resources]}

    def _describe(self, resource: Any) -> dict[str, Any]:
        kind, name = resource.resource_type, resource.resource_name
        wanted = resource.configuration_keys
        base = {"resource_type": kind, "resource_name": name}
        if kind == TOPIC_RESOURCE:
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
