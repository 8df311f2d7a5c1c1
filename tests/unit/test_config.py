"""Configuration: every bad config is refused at load with the file, the key path and why."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.config import load_config, parse_config
from bridge.config.reference import render_reference
from bridge.config.units import parse_duration, parse_size
from bridge.consume.client import consumer_settings
from bridge.errors import ConfigError

MINIMAL = {"topics": [{"source": "events"}]}
ROLLUP = {"granularity": "1m", "metrics": ["count"]}


def _write(tmp_path: Path, body: object) -> Path:
    path = tmp_path / "plateau.yaml"
    path.write_text(body if isinstance(body, str) else yaml.safe_dump(body))
    return path


def test_minimal_config_gets_defaults(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, MINIMAL), env={})
    assert config.kafka.group_id == "plateau"
    assert config.storage.data_dir == (tmp_path / "data").resolve()
    mapping = config.topics[0]
    assert (mapping.format, mapping.on_error, mapping.plateau_topic("events")) == (
        "raw",
        "fail",
        "events",
    )
    assert config.roll_policy(mapping).max_age_s == 10.0
    # The metrics endpoint is reachable from this host only unless configured otherwise.
    assert config.metrics.address == ("127.0.0.1", 9108)


def test_the_example_config_is_valid() -> None:
    example = Path(__file__).resolve().parents[2] / "config" / "plateau.yaml"
    config = load_config(example, env={})
    assert {m.source for m in config.topics} >= {"app-logs", "clicks"}
    assert config.storage.max_bytes == 20 * 1024**3


@pytest.mark.parametrize(
    ("body", "where", "why"),
    [
        ({"topics": [{"source": "a", "colour": "red"}]}, "topics.0.colour", "unknown key"),
        ({"storage": {"max_bytes": "lots"}, **MINIMAL}, "storage.max_bytes", "expected a size"),
        (
            {"defaults": {"roll": {"max_age": "soon"}}, **MINIMAL},
            "defaults.roll.max_age",
            "duration",
        ),
        ({"topics": [{"source": "regex:([a-"}]}, "topics.0.source", "bad regex"),
        ({"topics": [{"source": "a/b"}]}, "topics.0.source", "[A-Za-z0-9._-]"),
        ({"topics": [{"source": "a", "name": "../../etc"}]}, "topics.0", "[A-Za-z0-9._-]"),
        (
            {"topics": [{"source": "a", "format": "xml"}]},
            "topics.0.format",
            "'arrow', 'avro', 'protobuf' or 'json_schema'",
        ),
        (
            {"topics": [{"source": "a", "format": "avro"}]},
            "(top level)",
            "add a schema_registry section",
        ),
        (
            {"schema_registry": {"url": "registry:8081"}, "topics": [{"source": "a"}]},
            "schema_registry.url",
            "http:// or https://",
        ),
        (
            {
                "schema_registry": {"url": "http://r", "tls": {"certfile": "c"}},
                "topics": [{"source": "a"}],
            },
            "schema_registry.tls",
            "certfile and keyfile go together",
        ),
        (
            {"topics": [{"source": "a", "format": "json", "key_format": "avro"}]},
            "topics.0",
            "key_format goes with",
        ),
        (
            {"topics": [{"source": "a", "key_format": "avro", "key": "drop"}]},
            "topics.0",
            "needs key: keep",
        ),
        ({"topics": [{"source": "a", "on_error": "dlq"}]}, "topics.0", "needs a dlq topic"),
        ({"topics": [{"source": "a", "timestamp": "when"}]}, "topics.0.timestamp", "field:<name>"),
        (
            {"topics": [{"source": "a", "format": "json", "schema": {"x": "blob"}}]},
            "topics.0.schema",
            "types are",
        ),
        (
            {"topics": [{"source": "a", "format": "json", "schema": {"offset": "int"}}]},
            "topics.0.schema",
            "shadow",
        ),
        ({"topics": [{"source": "regex:x.*", "name": "fixed"}]}, "topics.0", "{source}"),
        (
            {"topics": [{"source": "a"}, {"source": "b", "name": "a"}]},
            "(top level)",
            "same plateau topic",
        ),
        # A roll-up topic is written by its topic's seals: records landed in it too took the
        # roll-up's offsets in the same folder, and overwrote its segments.
        (
            {
                "topics": [
                    {"source": "a", "rollups": [ROLLUP]},
                    {"source": "b", "name": "a.rollup.1m"},
                ]
            },
            "(top level)",
            "'a.rollup.1m' is the 1m roll-up of topic 'a'",
        ),
        (
            {
                "kafka_api": {},
                "topics": [
                    {"name": "a", "rollups": [ROLLUP]},
                    {"name": "b", "on_error": "dlq", "dlq": "a.rollup.1m"},
                ],
            },
            "(top level)",
            "dlq 'a.rollup.1m' of topic 'b' is the 1m roll-up of topic 'a'",
        ),
        # A letter consumed again by a mapping that refuses it again came back round to its
        # DLQ for good: one poison record made letters ten times a second.
        (
            {
                "topics": [
                    {
                        "source": "regex:loop-.*",
                        "format": "json",
                        "on_error": "dlq",
                        "dlq": "loop-dlq",
                    }
                ]
            },
            "(top level)",
            "dead letters would go round for good (regex:loop-.* -> loop-dlq -> loop-dlq)",
        ),
        (
            {
                "topics": [
                    {"source": "a", "format": "json", "on_error": "dlq", "dlq": "b"},
                    {"source": "b", "format": "avro", "on_error": "dlq", "dlq": "a"},
                ],
                "schema_registry": {"url": "http://127.0.0.1:8081"},
            },
            "(top level)",
            "(a -> b -> a)",
        ),
        ({"topics": []}, "topics", "at least 1"),
        ({}, "topics", "Field required"),
        ({"kafka": {"colour": "red"}, **MINIMAL}, "kafka", "not a field of kafka"),
        # An eager assignor would take the workers' incremental assignments for errors and
        # consume nothing, without a word.
        (
            {"kafka": {"partition.assignment.strategy": "range,roundrobin"}, **MINIMAL},
            "kafka",
            "partition.assignment.strategy 'range,roundrobin': plateau's workers",
        ),
        (
            {"storage": {"writer_threads": 0}, **MINIMAL},
            "storage.writer_threads",
            "greater than or equal to 1",
        ),
        ({"metrics": {"listen": "9108"}, **MINIMAL}, "metrics.listen", "host:port"),
        ({"metrics": {"listen": "localhost:99999"}, **MINIMAL}, "metrics.listen", "host:port"),
        ({"metrics": {"stall_after": 0}, **MINIMAL}, "metrics", "more than 0"),
        ({"topics": [{"format": "json"}]}, "topics.0", "needs a name"),
        ({"topics": [{"name": "p"}]}, "(top level)", "add a kafka_api section"),
        (
            {"topics": [{"source": "a", "partitions": 3}]},
            "topics.0",
            "produced topics (no source) only",
        ),
        (
            {"topics": [{"source": "a", "timestamp": "log_append_time"}]},
            "topics.0",
            "produced topics (no source) only",
        ),
        ({"kafka_api": {"listen": "9092"}, **MINIMAL}, "kafka_api.listen", "host:port"),
        ({"kafka_api": {"listen": "0.0.0.0:9092"}, **MINIMAL}, "kafka_api", "advertised"),
        (
            {"kafka_api": {"group_commit_hold": "2s"}, **MINIMAL},
            "kafka_api.group_commit_hold",
            "less than or equal to 1",
        ),
        (
            {"kafka_api": {"journal_max_bytes": "1MiB"}, **MINIMAL},
            "kafka_api.journal_max_bytes",
            "at least 32MiB",
        ),
        (
            {"kafka_api": {"sasl": {"users": [{"name": "a", "password": "x"}] * 2}}, **MINIMAL},
            "kafka_api.sasl",
            "user listed twice",
        ),
        (
            {
                "kafka_api": {"tls": {"certfile": "c", "keyfile": "k", "client_auth": "required"}},
                **MINIMAL,
            },
            "kafka_api.tls",
            "needs a cafile",
        ),
        (
            {"topics": [{"source": "a", "index": {"bloom": ["rid"], "fpp": 1.5}}]},
            "topics.0.index.fpp",
            "less than 1",
        ),
        (
            {"topics": [{"source": "a", "index": {"bloom": ["offset"]}}]},
            "topics.0.index.bloom",
            "'offset' needs no bloom filter",
        ),
        (
            {"topics": [{"source": "a", "index": {"bloom": ["rid", "rid"]}}]},
            "topics.0.index.bloom",
            "listed twice",
        ),
        (
            {"topics": [{"source": "a", "index": {"bloom": "rid"}}]},
            "topics.0.index.bloom",
            "list",
        ),
    ],
)
def test_bad_configs_name_the_key_and_reason(
    tmp_path: Path, body: dict, where: str, why: str
) -> None:
    path = _write(tmp_path, body)
    with pytest.raises(ConfigError) as refused:
        load_config(path, env={})
    message = str(refused.value)
    assert str(path) in message
    assert f"  {where}: " in message or (where == "(top level)" and "(top level)" in message)
    assert why in message


def test_topic_index_becomes_the_writer_policy(tmp_path: Path) -> None:
    body = {"topics": [{"source": "a", "index": {"bloom": ["key", "request_id"], "fpp": 0.05}}]}
    config = load_config(_write(tmp_path, body), env={})
    policy = config.topics[0].index.policy()
    assert (policy.bloom, policy.fpp) == (("key", "request_id"), 0.05)
    default = load_config(_write(tmp_path, MINIMAL), env={}).topics[0].index.policy()
    assert (default.bloom, default.fpp) == ((), 0.01)


def test_produced_topics_and_the_listener(tmp_path: Path) -> None:
    body = {
        "kafka_api": {"listen": "127.0.0.1:0", "tls": {"certfile": "c.pem", "keyfile": "/k.pem"}},
        "topics": [{"source": "a"}, {"name": "p", "partitions": 3, "format": "json"}],
    }
    config = load_config(_write(tmp_path, body), env={})
    assert [m.source for m in config.consumed] == ["a"]
    assert [(m.name, m.partitions) for m in config.produced] == [("p", 3)]
    assert config.mapping_for_plateau_topic("p") is config.produced[0]
    assert config.source_of("p") is None
    assert config.kafka_api is not None and config.kafka_api.tls is not None
    assert config.kafka_api.tls.certfile == (tmp_path / "c.pem").resolve()
    assert config.kafka_api.tls.keyfile == Path("/k.pem")


def test_not_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(_write(tmp_path, "topics: [unclosed"), env={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml", env={})
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(_write(tmp_path, "- a\n- b\n"), env={})


def test_environment_overrides(tmp_path: Path) -> None:
    path = _write(tmp_path, {"kafka": {"bootstrap_servers": "a:1"}, **MINIMAL})
    config = load_config(
        path,
        env={
            "PLATEAU__KAFKA__BOOTSTRAP_SERVERS": "b:2",
            "PLATEAU__KAFKA__SASL_PASSWORD": "s3cret",
            "PLATEAU__KAFKA__START_WITHOUT_WATERMARK": "committed",
            "PLATEAU__STORAGE__MEMORY_BUDGET": "64MiB",
            "PLATEAU__TOPICS__0__FORMAT": "json",
            "UNRELATED": "x",
        },
    )
    assert config.kafka.bootstrap_servers == "b:2"
    # Every one of plateau's own kafka keys, not only some, is told from librdkafka's.
    assert config.kafka.start_without_watermark == "committed"
    assert "start.without.watermark" not in config.kafka.librdkafka()
    assert config.kafka.librdkafka()["sasl.password"] == "s3cret"
    assert config.storage.memory_budget == 64 * 1024 * 1024
    assert config.topics[0].format == "json"
    assert config.redacted()["kafka"]["sasl.password"] == "***"


def test_bad_environment_override_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, MINIMAL)
    with pytest.raises(ConfigError, match=r"storage\.compression"):
        load_config(path, env={"PLATEAU__STORAGE__COMPRESSION": "gzip"})
    with pytest.raises(ConfigError, match="PLATEAU__TOPICS__5__FORMAT"):
        load_config(path, env={"PLATEAU__TOPICS__5__FORMAT": "json"})


def test_regex_mapping_resolution(tmp_path: Path) -> None:
    body = {
        "topics": [
            {"source": "orders"},
            {
                "source": "regex:feed-.*",
                "name": "landed-{source}",
                "retention": {"max_segments": 3},
            },
        ]
    }
    config = load_config(_write(tmp_path, body), env={})
    mapping = config.mapping_for("feed-x")
    assert mapping is not None and mapping.plateau_topic("feed-x") == "landed-feed-x"
    assert config.mapping_for("orders") is config.topics[0]
    assert config.mapping_for("other") is None
    assert config.source_of("landed-feed-x") == (config.topics[1], "feed-x")
    assert config.retention_policy(config.topics[1]).max_segments == 3


@pytest.mark.parametrize(
    ("text", "size"), [("512", 512), ("64MiB", 64 * 1024**2), ("1.5GB", 1_500_000_000), (7, 7)]
)
def test_sizes(text: object, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("text", "seconds"), [("250ms", 0.25), ("10s", 10), ("5m", 300), ("7d", 604800), (3, 3.0)]
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["-1", "ten", "5 parsecs", True, -3])
def test_bad_units(bad: object) -> None:
    with pytest.raises(ValueError, match=r"expected|negative"):
        parse_size(bad)
    with pytest.raises(ValueError, match=r"expected|negative"):
        parse_duration(bad)


def test_configuration_reference_is_current() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    assert render_reference() in doc, (
        "docs/configuration.md is out of date: run "
        "python -m bridge.config.reference --write docs/configuration.md"
    )


def test_replication_secrets_stay_out_of_the_redacted_config() -> None:
    config = parse_config(
        {
            "topics": [{"source": "t"}],
            "replication": {
                "target": "s3://b/p",
                "s3": {"access_key_id": "AKIA", "secret_access_key": "very-secret"},
            },
        }
    )
    assert "very-secret" not in json.dumps(config.redacted())
    assert "very-secret" not in repr(config)
    assert config.replication.s3.settings().secret_access_key == "very-secret"


@pytest.mark.parametrize("value", [["hunter2-pw"], {"old": "hunter2-pw"}])
def test_a_librdkafka_secret_of_the_wrong_shape_is_refused_without_its_value(
    tmp_path: Path, value: object
) -> None:
    body = {"kafka": {"sasl.password": value}, **MINIMAL}
    with pytest.raises(ConfigError) as refused:
        load_config(_write(tmp_path, body), env={})
    message = str(refused.value)
    assert "'sasl.password' must be a scalar" in message
    assert "hunter2-pw" not in message


def test_schema_registry_password_from_the_environment_and_tls_beside_the_file(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path,
        {
            "schema_registry": {
                "url": "https://registry:8081/",
                "basic_auth": {"username": "plateau"},
                "tls": {"cafile": "ca.pem"},
            },
            "topics": [{"source": "a", "format": "avro", "key_format": "protobuf"}],
        },
    )
    config = load_config(path, env={"PLATEAU__SCHEMA_REGISTRY__BASIC_AUTH__PASSWORD": "s3cret"})
    registry = config.schema_registry
    assert registry is not None
    settings = registry.client_settings()
    assert settings["url"] == "https://registry:8081"
    assert settings["basic.auth.user.info"] == "plateau:s3cret"
    assert settings["ssl.ca.location"] == str(tmp_path / "ca.pem")
    assert settings["max.retries"] == 0
    assert "s3cret" not in json.dumps(config.redacted())


def test_environment_values_are_taken_as_written(tmp_path: Path) -> None:
    # Read as YAML they lost a secret's " #..." as a comment, and "0123" became 83.
    path = _write(tmp_path, {"kafka": {"bootstrap_servers": "a:1"}, **MINIMAL})
    config = load_config(
        path,
        env={
            "PLATEAU__KAFKA__SASL_PASSWORD": "s3cret #2024",
            "PLATEAU__KAFKA__GROUP_ID": "0123",
            "PLATEAU__STORAGE__WRITER_THREADS": "3",
            "PLATEAU__TOPICS__0__INDEX__BLOOM": "[rid, user]",  # a list, written as one
        },
    )
    assert config.kafka.librdkafka()["sasl.password"] == "s3cret #2024"
    assert config.kafka.group_id == "0123"
    assert config.storage.writer_threads == 3
    assert config.topics[0].index.bloom == ["rid", "user"]


def test_a_secret_written_like_a_yaml_list_or_mapping_is_taken_as_text(tmp_path: Path) -> None:
    # Read as YAML, "[a, b]" became a list, refused with "must be a scalar" or "Input should
    # be a valid string": no way to set such a password from the environment.
    path = _write(tmp_path, {"kafka": {"bootstrap_servers": "a:1"}, **MINIMAL})
    config = load_config(
        path,
        env={
            "PLATEAU__KAFKA__SASL_PASSWORD": "[a, b]",
            "PLATEAU__REPLICATION__S3__SECRET_ACCESS_KEY": "{x: 1}",
            "PLATEAU__TOPICS__0__INDEX__BLOOM": "[rid]",
        },
    )
    assert config.kafka.librdkafka()["sasl.password"] == "[a, b]"
    secret = config.replication.s3.secret_access_key
    assert secret is not None
    assert secret.get_secret_value() == "{x: 1}"
    assert config.topics[0].index.bloom == ["rid"]  # a key that takes a list keeps it
    # Where the text is no better, the error is the one about what was written.
    with pytest.raises(ConfigError, match=r"storage\.memory_budget"):
        load_config(path, env={"PLATEAU__STORAGE__MEMORY_BUDGET": "[1]"})


def test_dead_letters_that_end_somewhere_are_accepted(tmp_path: Path) -> None:
    # Consumed again as raw (nothing to refuse), or by a mapping that skips: no way round.
    body = {
        "topics": [
            {"source": "regex:app-.*", "format": "json", "on_error": "dlq", "dlq": "app-dlq"},
            {"source": "app-dlq", "format": "raw"},
            {"source": "b", "format": "json", "on_error": "dlq", "dlq": "c"},
            {"source": "c", "format": "json", "on_error": "skip"},
        ]
    }
    config = load_config(_write(tmp_path, body), env={})
    assert config.mapping_for("app-dlq") is not None


@pytest.mark.parametrize(
    ("document", "key"),
    [
        ({"defaults": {"roll": {"max_age": 0}}}, "defaults.roll.max_age"),
        ({"defaults": {"roll": {"max_bytes": "0MiB"}}}, "defaults.roll.max_bytes"),
        ({"defaults": {"retention": {"max_bytes": 0}}}, "defaults.retention.max_bytes"),
        ({"defaults": {"retention": {"max_age": "0s"}}}, "defaults.retention.max_age"),
        ({"topics": [{"source": "a", "roll": {"max_age": "0s"}}]}, "topics.0.roll.max_age"),
    ],
)
def test_a_zero_roll_or_retention_limit_names_its_key(document: dict[str, Any], key: str) -> None:
    """A 0 here passed the configuration and failed later, as an engine error naming
    `roll.max_age_s` (found by the configuration fuzz test)."""
    with pytest.raises(ConfigError, match=rf"{re.escape(key)}: must be more than 0"):
        parse_config(document)


def test_each_worker_is_its_own_static_member(tmp_path: Path) -> None:
    """One group.instance.id in the config serves every worker of a node: two members under
    one id would fence each other out of the group."""
    body = {"kafka": {"group.instance.id": "node-a"}, **MINIMAL}
    config = load_config(_write(tmp_path, body), env={})
    ids = [consumer_settings(config, f"plateau-worker-{n}")["group.instance.id"] for n in (0, 1)]
    assert ids == ["node-a-plateau-worker-0", "node-a-plateau-worker-1"]
    assert "group.instance.id" not in consumer_settings(
        load_config(_write(tmp_path, MINIMAL), env={}), "plateau-worker-0"
    )
