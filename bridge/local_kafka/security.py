"""TLS and SASL for the local broker, to try a secured Kafka (and test against one) locally.

A secured broker keeps its PLAINTEXT listener (the controller and inter-broker traffic stay
on it, and tests use it as an administrator) and adds a SASL_SSL listener and, optionally, a
SASL_PLAINTEXT one, both accepting SCRAM-SHA-256 and PLAIN for one user. A CA and a broker
certificate for 127.0.0.1 are made on first start and kept, with the password, in
`<broker folder>/security/` (owner-only), so a restarted broker keeps serving the same
certificate and credentials.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from bridge.errors import LocalKafkaError

Mechanism = Literal["SCRAM-SHA-256", "PLAIN"]
Protocol = Literal["SASL_SSL", "SASL_PLAINTEXT"]

SECURITY_DIR = "security"
CA_FILE = "ca.pem"
BROKER_PEM = "broker.pem"
CREDENTIALS_FILE = "credentials.json"
MECHANISMS: tuple[Mechanism, ...] = ("SCRAM-SHA-256", "PLAIN")
# Both end up unquoted in `--add-scram name=...,password=...` and inside a JAAS string in
# server.properties, where quotes, commas, brackets and backslashes would need escaping.
_SAFE = re.compile(r"[A-Za-z0-9._~-]+")
_CERT_DAYS = 3650


@dataclass(frozen=True)
class SecuritySettings:
    """The secured listeners of a local broker and their one user."""

    username: str = "plateau"
    # None: a random password, made on first start and kept in the broker folder.
    password: str | None = field(default=None, repr=False)
    sasl_plaintext: bool = True

    def __post_init__(self) -> None:
        for name, value in (("username", self.username), ("password", self.password)):
            if value is not None and not _SAFE.fullmatch(value):
                raise LocalKafkaError(
                    f"the local broker's {name} may hold only letters, digits and . _ ~ -"
                )


@dataclass(frozen=True)
class SecureEndpoints:
    """What a client needs to reach the secured listeners."""

    sasl_ssl_bootstrap: str
    sasl_plaintext_bootstrap: str | None
    ca_file: Path
    username: str
    password: str = field(repr=False)

    def client_config(
        self, mechanism: Mechanism = "SCRAM-SHA-256", protocol: Protocol = "SASL_SSL"
    ) -> dict[str, str]:
        """librdkafka settings, bootstrap.servers included, for the given listener."""
        if protocol == "SASL_SSL":
            bootstrap = self.sasl_ssl_bootstrap
        elif self.sasl_plaintext_bootstrap is None:
            raise LocalKafkaError("this broker has no SASL_PLAINTEXT listener")
        else:
            bootstrap = self.sasl_plaintext_bootstrap
        config = {
            "bootstrap.servers": bootstrap,
            "security.protocol": protocol,
            "sasl.mechanism": mechanism,
            "sasl.username": self.username,
            "sasl.password": self.password,
        }
        if protocol == "SASL_SSL":
            config["ssl.ca.location"] = str(self.ca_file)
        return config


@dataclass(frozen=True)
class SecurityMaterial:
    """The files and credentials of one broker folder, made once."""

    directory: Path
    username: str
    password: str = field(repr=False)

    @property
    def ca_file(self) -> Path:
        return self.directory / CA_FILE

    @property
    def broker_pem(self) -> Path:
        return self.directory / BROKER_PEM

    def scram_argument(self) -> str:
        """The value of `kafka-storage format --add-scram` that creates the user."""
        return f"SCRAM-SHA-256=[name={self.username},password={self.password}]"

    def server_properties(self, listener_names: Sequence[str]) -> dict[str, str]:
        """The SASL and TLS entries of server.properties for the secured listeners."""
        props = {
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            # PEM stores: the key and chain are read as they were written, no JKS in between.
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.broker_pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            "ssl.client.auth": "none",
        }
        for name in listener_names:
            prefix = f"listener.name.{name.lower()}"
            props[f"{prefix}.scram-sha-256.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
            props[f"{prefix}.plain.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'user_{self.username}="{self.password}";'
            )
        return props


def prepare(work_dir: Path, settings: SecuritySettings) -> SecurityMaterial:
    """The broker folder's certificates and credentials, made on first use and then reused."""
    directory = work_dir / SECURITY_DIR
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    credentials = directory / CREDENTIALS_FILE
    if credentials.exists():
        saved = json.loads(credentials.read_text())
        username, password = str(saved["username"]), str(saved["password"])
        # SCRAM credentials live in the formatted metadata: a changed password would be
        # silently ignored by the broker, so say so instead.
        if username != settings.username or (settings.password not in (None, password)):
            raise LocalKafkaError(
                f"{work_dir} was formatted for user {username!r} with another password; "
                "use a fresh broker folder to change the credentials"
            )
    else:
        username = settings.username
        password = settings.password or secrets.token_urlsafe(18)
        write_private(credentials, json.dumps({"username": username, "password": password}) + "\n")
    material = SecurityMaterial(directory, username, password)
    if not (material.ca_file.exists() and material.broker_pem.exists()):
        ca_pem, broker_pem = _make_certificates()
        write_private(material.broker_pem, broker_pem)
        material.ca_file.write_text(ca_pem)
    return material


def _make_certificates() -> tuple[str, str]:
    """(CA certificate, broker key + certificate chain), as PEM text."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "plateau local Kafka CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # Clients check the name they dialled (librdkafka does by default): the broker
        # advertises 127.0.0.1, and localhost is there for people who type it.
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(IPv4Address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    # The CA key is not kept: nothing else gets signed by this CA.
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    ca_pem = ca_cert.public_bytes(pem).decode()
    return ca_pem, key_pem + cert.public_bytes(pem).decode() + ca_pem


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read: it holds a key or a password."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode otherwise
    with os.fdopen(fd, "w") as out:
        out.write(text)
