"""`topics[].rollups` from the configuration: policies, their own retention, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bridge.config import load_config
from bridge.errors import ConfigError
from bridge.store import open_store, retention_for


def _config(tmp_path: Path, topics: list[dict[str, object]]) -> Path:
    path = tmp_path / "plateau.yaml"
    body = {
        "storage": {"data_dir": str(tmp_path / "data")},
        "defaults": {"retention": {"max_age": "1d"}},
        "topics": topics,
    }
    path.write_text(yaml.safe_dump(body))
    return path


ROLLUP = {
    "granularity": "1m",
    "dimensions": ["service", "level"],
    "metrics": ["count", "sum:latency", "distinct:user"],
    "retention": {"max_age": "90d"},
}


def test_rollups_become_policies_with_their_own_retention(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, [{"source": "logs", "rollups": [ROLLUP]}]), env={})
    [policy] = config.topics[0].rollup_policies()
    assert (policy.label, policy.granularity_ms, policy.dimensions) == (
        "1m",
        60_000,
        ("service", "level"),
    )
    assert [m.name for m in policy.metrics] == ["count", "sum_latency", "distinct_user"]
    assert policy.derived_topic("logs") == "logs.rollup.1m"
    derived = config.rollup_retention("logs.rollup.1m")
    assert derived is not None and derived.max_age_s == 90 * 86_400
    assert config.rollup_retention("logs.rollup.1h") is None
    assert config.rollup_retention("logs") is None
    with open_store(config) as store:
        retention = retention_for(config, store)
        assert retention.policy("logs.rollup.1m").max_age_s == 90 * 86_400
        assert retention.policy("logs").max_age_s == 86_400


def test_a_regex_mappings_rollups_keep_their_own_retention(tmp_path: Path) -> None:
    # The roll-up topic's name matches the regex too; it is still a roll-up, not a raw topic.
    config = load_config(
        _config(tmp_path, [{"source": "regex:logs.*", "rollups": [ROLLUP]}]), env={}
    )
    with open_store(config) as store:
        retention = retention_for(config, store)
        assert retention.policy("logs-eu.rollup.1m").max_age_s == 90 * 86_400
        assert retention.policy("logs-eu").max_age_s == 86_400
        assert retention.policy("logs-eu.rollup.1h").max_age_s == 86_400


@pytest.mark.parametrize(
    ("rollup", "why"),
    [
        ({"granularity": "1 minute", "metrics": ["count"]}, "like 10s, 1m"),
        ({"granularity": "1m", "metrics": ["p99:latency"]}, "one of count"),
        ({"granularity": "1m", "metrics": ["sum"]}, "the others one"),
        ({"granularity": "1m"}, "metrics"),
        # Decoded fields named like plateau's columns in any case are stored with a `_`:
        # named as the field, the roll-up would group or sum nothing, silently.
        (
            {"granularity": "1m", "dimensions": ["Level", "Key"], "metrics": ["count"]},
            "rollup dimension 'Key': a decoded field named so is stored as 'Key_'",
        ),
        (
            {"granularity": "1m", "metrics": ["sum:partition"]},
            "rollup metric sum of 'partition': a decoded field named so is stored as 'partition_'",
        ),
    ],
)
def test_bad_rollups_name_the_field(tmp_path: Path, rollup: dict[str, object], why: str) -> None:
    path = _config(tmp_path, [{"source": "logs", "rollups": [rollup]}])
    with pytest.raises(ConfigError) as refused:
        load_config(path, env={})
    assert "topics.0.rollups.0" in str(refused.value)
    assert why in str(refused.value)


def test_two_rollups_of_one_granularity_are_refused(tmp_path: Path) -> None:
    # Both would seal into logs.rollup.1m at the same offsets: every seal of the topic
    # conflicted with itself, and its partitions stalled.
    other = {"granularity": "1m", "dimensions": ["host"], "metrics": ["count"]}
    path = _config(tmp_path, [{"source": "logs", "rollups": [ROLLUP, other]}])
    with pytest.raises(ConfigError) as refused:
        load_config(path, env={})
    assert "topics.0" in str(refused.value)
    assert "two rollups of granularity 1m" in str(refused.value)


def test_roll_ups_and_bloom_filters_name_a_suffixed_field_by_its_stored_column(
    tmp_path: Path,
) -> None:
    topics = [
        {
            "source": "logs",
            "format": "json",
            "index": {"bloom": ["key", "Key_"]},
            "rollups": [{"granularity": "1m", "dimensions": ["Key_"], "metrics": ["sum:Offset_"]}],
        }
    ]
    config = load_config(_config(tmp_path, topics), env={})
    assert config.topics[0].index.bloom == ["key", "Key_"]
    path = _config(tmp_path, [{"source": "logs", "format": "json", "index": {"bloom": ["Key"]}}])
    with pytest.raises(ConfigError, match=r"index\.bloom 'Key': a decoded field named so"):
        load_config(path, env={})
