"""Every example config loads as `plateau serve --config` loads it, with the secrets given the
way its comments say, and examples/README.md lists every example. (The examples run end to
end in tests/kafka_api, tests/integration and tests/spark: test_examples.py in each.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bridge.errors import ConfigError
from tests.bridge_support import REPO
from tests.examples_support import EXAMPLES, example_config

SECURE = EXAMPLES / "secure-listener" / "plateau.yaml"
PASSWORDS = {
    "PLATEAU__KAFKA_API__SASL__USERS__0__PASSWORD": "ingest #1",
    "PLATEAU__KAFKA_API__SASL__USERS__1__PASSWORD": "0123",
}
# What each config needs from the environment; the others need nothing.
ENVIRONMENT = {SECURE: PASSWORDS}
CONFIGS = sorted(EXAMPLES.glob("*/plateau.yaml"))


def test_every_example_folder_has_a_config_or_a_script() -> None:
    folders = sorted(p for p in EXAMPLES.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert [f.name for f in folders] == [
        "consume-kafka",
        "produce-direct",
        "secure-listener",
        "spark",
    ]
    assert {c.parent.name for c in CONFIGS} == {
        "consume-kafka",
        "produce-direct",
        "secure-listener",
    }


@pytest.mark.parametrize("path", CONFIGS, ids=[c.parent.name for c in CONFIGS])
def test_example_config_loads_with_paths_beside_it(path: Path) -> None:
    config = example_config(path, ENVIRONMENT.get(path, {}))
    # Relative to the config file, whatever folder plateau is started from.
    assert config.storage.data_dir == path.parent / "data"
    assert config.topics


def test_secure_listener_takes_its_passwords_from_the_environment_only() -> None:
    with pytest.raises(ConfigError) as refused:
        example_config(SECURE)
    assert "kafka_api.sasl.users.0.password: Field required" in str(refused.value)
    assert "kafka_api.sasl.users.1.password: Field required" in str(refused.value)
    config = example_config(SECURE, PASSWORDS)
    api = config.kafka_api
    assert api is not None and api.tls is not None and api.sasl is not None
    # A password is taken as written, leading zeros and '#' included.
    assert [u.password.get_secret_value() for u in api.sasl.users] == ["ingest #1", "0123"]
    assert api.sasl.mechanisms == ["SCRAM-SHA-512"]
    assert all(u.topics for u in api.sasl.users)
    assert api.tls.certfile == SECURE.parent / "tls" / "server.pem"
    assert api.tls.keyfile == SECURE.parent / "tls" / "server-key.pem"


def test_produce_direct_and_consume_kafka_keep_their_dead_letters_out_of_their_sources() -> None:
    direct = example_config(EXAMPLES / "produce-direct" / "plateau.yaml")
    assert [t.name for t in direct.produced] == ["app-events", "audit-raw"]
    assert direct.kafka_api is not None and direct.kafka_api.listen.startswith("127.0.0.1:")
    consumed = example_config(EXAMPLES / "consume-kafka" / "plateau.yaml")
    (mapping,) = consumed.consumed
    assert mapping.is_regex and mapping.dlq is not None
    # Letters consumed again by the mapping that sent them would be sent again, forever.
    assert consumed.mapping_for(mapping.dlq) is None


def test_examples_readme_links_resolve_and_name_every_example() -> None:
    text = (EXAMPLES / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert links
    for link in links:
        assert (EXAMPLES / link).exists(), link
    for folder in ("produce-direct/", "consume-kafka/", "secure-listener/", "spark/"):
        assert f"[{folder}" in text
    assert "](examples/README.md)" in (REPO / "README.md").read_text()


@pytest.mark.parametrize(
    "script", sorted(EXAMPLES.glob("*/*.py")), ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_example_scripts_compile(script: Path) -> None:
    compile(script.read_text(), str(script), "exec")
