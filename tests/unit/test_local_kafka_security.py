"""The local broker's TLS material and SASL settings, checked without starting a broker."""

from __future__ import annotations

import json
import stat
from ipaddress import IPv4Address
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from bridge.errors import LocalKafkaError
from bridge.local_kafka import BrokerSettings, LocalKafka
from bridge.local_kafka.security import SecureEndpoints, SecuritySettings, prepare


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_broker_certificate_is_signed_by_the_ca_for_loopback(tmp_path: Path) -> None:
    material = prepare(tmp_path, SecuritySettings(password="pw-1"))
    ca = x509.load_pem_x509_certificate(material.ca_file.read_bytes())
    pem = material.broker_pem.read_bytes()
    chain = x509.load_pem_x509_certificates(pem)
    chain[0].verify_directly_issued_by(ca)
    assert chain[1] == ca
    names = chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert IPv4Address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    # Kafka's PEM keystore reads an unencrypted PKCS#8 key when no key password is set.
    assert b"-----BEGIN PRIVATE KEY-----" in pem
    assert load_pem_private_key(pem, password=None) is not None
    assert _mode(material.directory) == 0o700
    assert _mode(material.broker_pem) == 0o600
    assert _mode(material.directory / "credentials.json") == 0o600


def test_material_is_made_once_and_reused(tmp_path: Path) -> None:
    first = prepare(tmp_path, SecuritySettings())
    ca = first.ca_file.read_bytes()
    second = prepare(tmp_path, SecuritySettings())
    assert second.password == first.password and len(first.password) >= 20
    assert second.ca_file.read_bytes() == ca
    saved = json.loads((tmp_path / "security" / "credentials.json").read_text())
    assert saved == {"username": "plateau", "password": first.password}
    with pytest.raises(LocalKafkaError, match="use a fresh broker folder"):
        prepare(tmp_path, SecuritySettings(password="another-one"))
    with pytest.raises(LocalKafkaError, match="use a fresh broker folder"):
        prepare(tmp_path, SecuritySettings(username="someone"))


@pytest.mark.parametrize("password", ['with"quote', "a,b", "x]y", "back\\slash", "new\nline", ""])
def test_unsafe_credentials_are_refused(password: str) -> None:
    with pytest.raises(LocalKafkaError, match="may hold only"):
        SecuritySettings(password=password)


def test_server_properties_enable_both_mechanisms_per_listener(tmp_path: Path) -> None:
    material = prepare(tmp_path, SecuritySettings(password="pw-2"))
    props = material.server_properties(["SASL_SSL", "SASL_PLAINTEXT"])
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-256,PLAIN"
    assert props["ssl.keystore.type"] == "PEM"
    assert props["ssl.keystore.location"] == str(material.broker_pem)
    for listener in ("sasl_ssl", "sasl_plaintext"):
        assert (
            "ScramLoginModule" in props[f"listener.name.{listener}.scram-sha-256.sasl.jaas.config"]
        )
        assert 'user_plateau="pw-2"' in props[f"listener.name.{listener}.plain.sasl.jaas.config"]
    assert material.scram_argument() == "SCRAM-SHA-256=[name=plateau,password=pw-2]"


def test_client_config_and_repr(tmp_path: Path) -> None:
    endpoints = SecureEndpoints(
        sasl_ssl_bootstrap="127.0.0.1:1",
        sasl_plaintext_bootstrap=None,
        ca_file=tmp_path / "ca.pem",
        username="plateau",
        password="pw-3",
    )
    assert endpoints.client_config("PLAIN") == {
        "bootstrap.servers": "127.0.0.1:1",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "plateau",
        "sasl.password": "pw-3",
        "ssl.ca.location": str(tmp_path / "ca.pem"),
    }
    with pytest.raises(LocalKafkaError, match="no SASL_PLAINTEXT listener"):
        endpoints.client_config(protocol="SASL_PLAINTEXT")
    # Test failures print fixtures' values; the password must not be among them.
    assert "pw-3" not in repr(endpoints)
    assert "pw-3" not in repr(SecuritySettings(password="pw-3"))


def test_security_on_a_folder_formatted_without_it_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    libs = tmp_path / "libs"
    libs.mkdir()
    (libs / "kafka_2.13-4.1.2.jar").write_bytes(b"")
    monkeypatch.setenv("PLATEAU_KAFKA_LIBS", str(libs))
    # The refusal comes before java runs; a machine without java would fail earlier.
    monkeypatch.setattr("bridge.local_kafka.broker.shutil.which", lambda _: "/usr/bin/java")
    work_dir = tmp_path / "kafka"
    (work_dir / "data").mkdir(parents=True)
    (work_dir / "data" / "meta.properties").write_text("node.id=1\n")
    broker = LocalKafka(work_dir, BrokerSettings(security=SecuritySettings()))
    with pytest.raises(LocalKafkaError, match="formatted without security"):
        broker.start()
    assert broker.pid is None
