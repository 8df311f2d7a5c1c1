"""TLS and SASL (PLAIN, SCRAM-SHA-256/512) on the listener, with librdkafka as the client,
and the per-user topic allowlist."""

from __future__ import annotations

import base64
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource
from cryptography.hazmat.primitives import serialization
from kio.schema.errors import ErrorCode
from structlog.testing import capture_logs

from bridge.errors import ConfigError
from bridge.kafka_api import sasl as sasl_module
from bridge.local_kafka.security import SecuritySettings, prepare
from bridge.ops.check import check
from tests.kafka_api.support import RawClient, api_config, listening, stored
from tests.kafka_api.test_tools import kcat

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
USERS = [
    {"name": "alice", "password": "alice-secret"},
    {"name": "limited", "password": "limited-secret", "topics": ["app-*"]},
]


def secured(tmp_path: Path, **extra: Any) -> Any:
    material = prepare(tmp_path / "tls", SecuritySettings())
    config = api_config(
        tmp_path / "store",
        [{"name": "events", "partitions": 1}, {"name": "app-logs", "partitions": 1}],
        tls={"certfile": str(material.broker_pem), "keyfile": str(material.broker_pem)},
        sasl={"mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], "users": USERS},
        **extra,
    )
    return config, material.ca_file


def sasl_ssl(ca: Path, mechanism: str, user: str, password: str) -> dict[str, str]:
    """librdkafka's settings for SASL over TLS, trusting the test CA."""
    return {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(ca),
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def send(settings: dict[str, Any], topic: str, count: int = 20) -> list[KafkaError]:
    errors: list[KafkaError] = []
    client_errors: list[KafkaError] = []
    producer = Producer(
        {
            "message.timeout.ms": 8000,
            "error_cb": client_errors.append,
            **settings,
        }
    )
    for i in range(count):
        producer.produce(
            topic, value=b"v%d" % i, on_delivery=lambda e, _m: e is None or errors.append(e)
        )
    producer.flush(15)
    return errors + client_errors


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_ssl_producers_authenticate(tmp_path: Path, mechanism: str) -> None:
    config, ca = secured(tmp_path)
    with listening(config) as (_server, bootstrap):
        errors = send(
            {
                "bootstrap.servers": bootstrap,
                **sasl_ssl(ca, mechanism, "alice", "alice-secret"),
                "acks": "all",
            },
            "events",
        )
    assert errors == []
    assert stored(tmp_path / "store", "events").num_rows == 20


def test_wrong_password_and_plaintext_clients_store_nothing(tmp_path: Path) -> None:
    config, ca = secured(tmp_path)
    with listening(config) as (server, bootstrap):
        wrong = send(
            {
                "bootstrap.servers": bootstrap,
                **sasl_ssl(ca, "SCRAM-SHA-256", "alice", "not-it"),
            },
            "events",
            count=3,
        )
        assert any(e.code() == KafkaError._AUTHENTICATION for e in wrong), wrong
        # A client that skips TLS never gets a request through.
        plain = send({"bootstrap.servers": bootstrap}, "events", count=3)
        assert plain
        assert server.stats.records["events"] == 0
    assert stored(tmp_path / "store", "events").num_rows == 0


def test_topic_allowlist(tmp_path: Path) -> None:
    config, ca = secured(tmp_path)
    settings = sasl_ssl(ca, "SCRAM-SHA-512", "limited", "limited-secret")
    with listening(config) as (_server, bootstrap):
        allowed = send({"bootstrap.servers": bootstrap, **settings}, "app-logs")
        refused = send({"bootstrap.servers": bootstrap, **settings}, "events", count=2)
        admin = AdminClient({"bootstrap.servers": bootstrap, **settings})
        # The topics it may not write are not listed to it, as Kafka lists under ACLs.
        assert set(admin.list_topics(timeout=15).topics) == {"app-logs"}
        named = admin.list_topics(topic="events", timeout=15).topics["events"]
        assert named.error is not None
        assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        unlimited = sasl_ssl(ca, "SCRAM-SHA-512", "alice", "alice-secret")
        alice = AdminClient({"bootstrap.servers": bootstrap, **unlimited})
        assert set(alice.list_topics(timeout=15).topics) == {"app-logs", "events"}
    assert allowed == []
    assert refused and all(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in refused)
    assert stored(tmp_path / "store", "app-logs").num_rows == 20
    assert stored(tmp_path / "store", "events").num_rows == 0


def test_describe_configs_keeps_to_the_allowlist(tmp_path: Path) -> None:
    """A user learns nothing of a topic it may not write, as under Kafka's ACLs: not its
    settings, nor whether it exists (a name nobody created is answered the same)."""
    with listening(allowlisted(tmp_path)) as (_server, bootstrap):
        admin = limited_admin(bootstrap)
        asked = [ConfigResource("topic", name) for name in ("app-logs", "events", "nobody")]
        answers = admin.describe_configs(asked, request_timeout=15)
        own = next(f for r, f in answers.items() if r.name == "app-logs").result(15)
        assert own["cleanup.policy"].value == "delete"
        for name in ("events", "nobody"):
            future = next(f for r, f in answers.items() if r.name == name)
            assert refusal(future) == KafkaError.TOPIC_AUTHORIZATION_FAILED, name


def allowlisted(tmp_path: Path) -> Any:
    """Two topics, and SASL users of which `limited` may write only `app-*` topics."""
    return api_config(
        tmp_path / "store",
        [{"name": "events", "partitions": 1}, {"name": "app-logs", "partitions": 1}],
        sasl={"mechanisms": ["PLAIN"], "users": USERS},
    )


def limited_admin(bootstrap: str) -> AdminClient:
    """An admin client signed in as the user `limited`."""
    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "limited",
            "sasl.password": "limited-secret",
        }
    )


def refusal(future: Any) -> int:
    """The error code an admin request's future failed with. Taken without raising it: a
    raised exception's traceback holds the frames it went through, and with them the
    client, past the test, retrying the stopped listener in the log until the run ends."""
    error = future.exception(15)
    assert isinstance(error, KafkaException), error
    return int(error.args[0].code())


def _encrypted_key(material: Any, path: Path, password: bytes) -> Path:
    key = serialization.load_pem_private_key(material.broker_pem.read_bytes(), None)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password),
        )
    )
    return path


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("certfile missing", "kafka_api.tls.certfile {missing}: cannot read: No such file"),
        ("keyfile not PEM", "kafka_api.tls.keyfile {junk}: holds no PEM private key"),
        ("certfile not PEM", "kafka_api.tls.certfile {junk}: holds no PEM certificate"),
        ("key encrypted", "kafka_api.tls.keyfile {encrypted}: the key is encrypted"),
        ("wrong password", "kafka_api.tls: the key {encrypted} does not load"),
        ("another's key", "kafka_api.tls: the key {broker} does not load with the certificate"),
        ("cafile not PEM", "kafka_api.tls.cafile {junk}: holds no PEM CA certificate"),
    ],
)
def test_tls_files_that_do_not_load_are_named(tmp_path: Path, case: str, said: str) -> None:
    """OpenSSL's own errors name no file ("No such file or directory", "PEM lib"), and
    for an encrypted key without a password it asks on the terminal. Nothing is acquired
    before the certificate loads: a good start on the same store follows at once."""
    material = prepare(tmp_path / "tls", SecuritySettings())
    files = {
        "missing": tmp_path / "missing.pem",
        "junk": tmp_path / "junk.pem",
        "encrypted": _encrypted_key(material, tmp_path / "encrypted.pem", b"right"),
        "broker": material.broker_pem,
    }
    files["junk"].write_text("not a certificate\n")
    broker = str(material.broker_pem)
    tls = {
        "certfile missing": {"certfile": str(files["missing"]), "keyfile": broker},
        "keyfile not PEM": {"certfile": broker, "keyfile": str(files["junk"])},
        "certfile not PEM": {"certfile": str(files["junk"]), "keyfile": broker},
        "key encrypted": {"certfile": broker, "keyfile": str(files["encrypted"])},
        "wrong password": {
            "certfile": broker,
            "keyfile": str(files["encrypted"]),
            "password": "wrong",
        },
        "another's key": {"certfile": str(material.ca_file), "keyfile": broker},
        "cafile not PEM": {"certfile": broker, "keyfile": broker, "cafile": str(files["junk"])},
    }[case]
    store = tmp_path / "store"
    with pytest.raises(ConfigError) as failed, listening(api_config(store, tls=tls)):
        pass
    assert said.format(**files) in str(failed.value)
    with pytest.raises(ConfigError) as checked:
        check(api_config(store, tls=tls), timeout_s=2)
    assert said.format(**files) in str(checked.value)
    good = {"certfile": broker, "keyfile": str(files["encrypted"]), "password": "right"}
    with listening(api_config(store, tls=good)) as (server, _bootstrap):
        assert server.address is not None


def test_passwords_come_from_the_environment(tmp_path: Path) -> None:
    """The same override rule as the consumer side: PLATEAU__<section>__<key>."""
    from bridge.config import load_config  # noqa: PLC0415

    path = tmp_path / "plateau.yaml"
    path.write_text(
        "kafka_api:\n  sasl:\n    users:\n      - name: alice\n        password: from-file\n"
        "topics:\n  - name: events\n"
    )
    config = load_config(path, env={"PLATEAU__KAFKA_API__SASL__USERS__0__PASSWORD": "from-env"})
    assert config.kafka_api is not None and config.kafka_api.sasl is not None
    assert config.kafka_api.sasl.users[0].password.get_secret_value() == "from-env"
    assert "from-env" not in repr(config)


def test_large_frames_wait_for_authentication(tmp_path: Path) -> None:
    """A frame's buffer is made when its size arrives: before SASL authentication a client
    gets 512 KiB (Kafka's sasl.server.max.receive.size), after it the full request size."""
    config = api_config(
        tmp_path / "store",
        [{"name": "events", "partitions": 1}],
        sasl={"mechanisms": ["SCRAM-SHA-256"], "users": USERS},
    )
    with listening(config) as (_server, bootstrap):
        stranger = RawClient(bootstrap)
        stranger.sock.sendall(struct.pack(">i", 8 * 1024 * 1024))
        assert stranger.closed_by_peer()
        stranger.close()
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "alice",
                "sasl.password": "alice-secret",
                "message.timeout.ms": 8000,
            }
        )
        errors: list[KafkaError] = []
        producer.produce(
            "events", value=b"x" * 700_000, on_delivery=lambda e, _m: e is None or errors.append(e)
        )
        assert producer.flush(15) == 0
        assert errors == []
    assert stored(tmp_path / "store", "events").column("value").to_pylist() == [b"x" * 700_000]


def test_a_failed_authentication_closes_the_connection(tmp_path: Path) -> None:
    """As Kafka does: the client is told why, and the connection closes, so passwords
    cannot be tried one after another on it."""
    config = api_config(
        tmp_path / "store",
        [{"name": "events", "partitions": 1}],
        sasl={"mechanisms": ["PLAIN"], "users": USERS},
    )
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        shake = client.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert shake.error_code == ErrorCode.none
        with capture_logs() as logs:
            wrong = client.call(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0guess-1"})
        assert wrong.error_code == ErrorCode.sasl_authentication_failed
        # The client is not told whether the user exists (which would let it find the
        # names), as Kafka does not tell it; the log says which.
        assert wrong.error_message == "authentication failed: invalid username or password"
        assert [e["error"] for e in logs if e["event"] == "sasl_failed"] == [
            "wrong password for user 'alice'"
        ]
        assert client.closed_by_peer()
        client.close()
        stranger = RawClient(bootstrap)
        stranger.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        nobody = stranger.call(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0mallory\0guess-1"})
        assert nobody.error_message == wrong.error_message
        stranger.close()
        # A right password on a new connection goes through.
        again = RawClient(bootstrap)
        assert again.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
        right = again.call(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-secret"})
        assert right.error_code == ErrorCode.none
        again.close()


def test_scram_does_not_tell_an_unknown_user_from_a_known_one(tmp_path: Path) -> None:
    """A user name is not confirmed before the proof: an unknown one gets a server-first
    message like a known one (the same salt each time, as a user has one), and the
    client-final is refused as a wrong password is; only the log says which it was."""
    config = api_config(
        tmp_path / "store",
        [{"name": "events", "partitions": 1}],
        sasl={"mechanisms": ["SCRAM-SHA-256"], "users": USERS},
    )

    def first(bootstrap: str, name: str) -> tuple[RawClient, dict[str, str]]:
        client = RawClient(bootstrap)
        shake = client.call(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
        assert shake.error_code == ErrorCode.none
        answer = client.call(SASL_AUTHENTICATE, 2, {"auth_bytes": f"n,,n={name},r=c1".encode()})
        assert answer.error_code == ErrorCode.none, name
        text = answer.auth_bytes.decode()
        return client, dict(part.split("=", 1) for part in text.split(","))

    with listening(config) as (_server, bootstrap):
        answers = {}
        for name in ("alice", "mallory", "mallory"):
            client, fields = first(bootstrap, name)
            assert fields["r"].startswith("c1") and fields["i"] == "4096"
            answers.setdefault(name, []).append(fields["s"])
            proof = base64.b64encode(bytes(32)).decode()
            with capture_logs() as logs:
                final = client.call(
                    SASL_AUTHENTICATE,
                    2,
                    {"auth_bytes": f"c=biws,r={fields['r']},p={proof}".encode()},
                )
            assert final.error_code == ErrorCode.sasl_authentication_failed
            assert final.error_message == "authentication failed: invalid username or password"
            said = "unknown user" if name == "mallory" else "wrong password for user"
            assert [e["error"] for e in logs if e["event"] == "sasl_failed"] == [f"{said} {name!r}"]
            assert client.closed_by_peer()
            client.close()
    assert len(answers["mallory"]) == 2 and len(set(answers["mallory"])) == 1
    assert len(base64.b64decode(answers["mallory"][0])) == len(
        base64.b64decode(answers["alice"][0])
    )


def test_kcat_authenticates(tmp_path: Path) -> None:
    """kcat on the distribution's librdkafka (2.0 here), which takes SASL for supported
    only when SaslHandshake v0 is in the broker's range, as every Kafka broker lists it.
    (Its SCRAM repeats the client nonce in client-final, which Kafka 4 refuses too:
    librdkafka 2.6.1 fixed it.)"""
    mechanism = "PLAIN"
    config, ca = secured(tmp_path)
    with listening(config) as (_server, bootstrap):
        done = subprocess.run(
            [
                kcat(),
                "-P",
                "-b",
                bootstrap,
                "-t",
                "events",
                "-X",
                "security.protocol=SASL_SSL",
                "-X",
                f"ssl.ca.location={ca}",
                "-X",
                f"sasl.mechanism={mechanism}",
                "-X",
                "sasl.username=alice",
                "-X",
                "sasl.password=alice-secret",
                "-X",
                "message.timeout.ms=20000",
            ],
            input="one\ntwo\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    assert stored(tmp_path / "store", "events").column("value").to_pylist() == [b"one", b"two"]


def test_nothing_but_sasl_is_answered_before_authentication(tmp_path: Path) -> None:
    """Not a Fetch, which is never served, nor a request of a version plateau does not
    answer: before authentication they close the connection as any other request does.
    ApiVersions of any version is still answered, as clients ask it first."""
    config = api_config(
        tmp_path / "store",
        [{"name": "events", "partitions": 1}],
        sasl={"mechanisms": ["PLAIN"], "users": USERS},
    )
    fetch = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": 100,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    asked = [(1, 12, fetch), (22, 6, {"transaction_timeout": 1000, "producer_id": -1})]
    with listening(config) as (_server, bootstrap):
        for api_key, version, body in asked:
            client = RawClient(bootstrap)
            client.send_frame(client.request_frame(api_key, version, body))
            assert client.closed_by_peer(), (api_key, version)
            client.close()
        client = RawClient(bootstrap)
        versions = client.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert versions.error_code == ErrorCode.none
        assert client.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
        login = client.call(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-secret"})
        assert login.error_code == ErrorCode.none
        assert client.call(1, 12, fetch).error_code == ErrorCode.unsupported_version
        client.close()


def test_a_v0_handshake_is_refused(tmp_path: Path) -> None:
    """SaslHandshake v0 is listed for clients that check it is there; its raw tokens are
    not taken, so a v0 handshake is answered UNSUPPORTED_VERSION."""
    config = api_config(
        tmp_path / "store",
        [{"name": "events", "partitions": 1}],
        sasl={"mechanisms": ["PLAIN"], "users": USERS},
    )
    with listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        shake = client.call(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
        assert shake.error_code == ErrorCode.unsupported_version
        assert list(shake.mechanisms) == ["PLAIN"]
        client.close()


def test_scram_derives_a_users_salted_password_once(tmp_path: Path) -> None:
    """Deriving it takes thousands of hash rounds on the listener's event loop: once per
    user and mechanism, not at every login (each producer below logs in afresh)."""
    config, ca = secured(tmp_path)
    settings = sasl_ssl(ca, "SCRAM-SHA-512", "alice", "alice-secret")
    sasl_module._salted.cache_clear()
    with listening(config) as (_server, bootstrap):
        for _ in range(3):
            assert send({"bootstrap.servers": bootstrap, **settings}, "events", count=2) == []
    logins = sasl_module._salted.cache_info()
    assert logins.misses == 1
    assert logins.hits >= 2
    assert stored(tmp_path / "store", "events").num_rows == 6
