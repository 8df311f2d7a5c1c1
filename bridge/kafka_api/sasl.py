"""SASL on the listener: PLAIN and SCRAM-SHA-256/512 (RFC 5802, 7677) against the users in
the config, carried by SaslHandshake v1 and SaslAuthenticate as Kafka does.

The config holds passwords, so SCRAM's salted password is derived per exchange from a
fresh salt; nothing about a user's credentials is kept beyond the exchange.
"""

from __future__ import annotations

import base64
import fnmatch
import functools
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from bridge.config.kafka_api import KafkaApiSasl, KafkaApiUser

ITERATIONS = 4096
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Makes the salt offered for a name no user has: the same for that name at every attempt,
# as a user's is, and like no other.
_DECOY_KEY = secrets.token_bytes(32)


class AuthenticationError(Exception):
    """The credentials are wrong or the exchange is malformed (the message says which)."""


class CredentialsError(AuthenticationError):
    """An unknown user or a wrong password. The client is told only that the credentials
    are invalid, as Kafka tells it: which of the two would let it find the user names."""

    client_message = "invalid username or password"


@dataclass
class Principal:
    name: str
    topics: list[str] | None  # shell-style patterns; None: every topic

    def may_write(self, topic: str) -> bool:
        return self.topics is None or any(fnmatch.fnmatchcase(topic, p) for p in self.topics)


@dataclass
class Exchange:
    """One connection's authentication, from SaslHandshake to the last SaslAuthenticate."""

    config: KafkaApiSasl
    mechanism: str | None = None
    principal: Principal | None = None
    _scram: _Scram | None = field(default=None, repr=False)

    def choose(self, mechanism: str) -> bool:
        if mechanism not in self.config.mechanisms:
            return False
        self.mechanism = mechanism
        return True

    def step(self, token: bytes) -> bytes:
        """Answer the client's next token; sets `principal` once the client is known."""
        if self.mechanism is None:
            raise AuthenticationError("SaslAuthenticate before SaslHandshake")
        if self.principal is not None:
            raise AuthenticationError("already authenticated")
        if self.mechanism == "PLAIN":
            self.principal = self._plain(token)
            return b""
        if self._scram is None:
            self._scram = _Scram(_HASHES[self.mechanism], self._find)
            return self._scram.first(token)
        answer = self._scram.final(token)
        self.principal = self._scram.principal
        return answer

    def _plain(self, token: bytes) -> Principal:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationError("a PLAIN token is authzid NUL user NUL password")
        _, name, password = (p.decode("utf-8", "replace") for p in parts)
        user = self._user(name)
        if not hmac.compare_digest(user.password.get_secret_value().encode(), password.encode()):
            raise CredentialsError(f"wrong password for user {name!r}")
        return Principal(user.name, user.topics)

    def _user(self, name: str) -> KafkaApiUser:
        user = self._find(name)
        if user is None:
            raise CredentialsError(f"unknown user {name!r}")
        return user

    def _find(self, name: str) -> KafkaApiUser | None:
        for user in self.config.users:
            if user.name == name:
                return user
        return None


class _Scram:
    def __init__(self, digest: str, lookup: Callable[[str], KafkaApiUser | None]) -> None:
        self.digest = digest
        self.lookup = lookup
        self.principal: Principal | None = None
        self._expected: tuple[bytes, bytes, str] | None = None
        self._name = ""
        self._user: KafkaApiUser | None = None

    def first(self, token: bytes) -> bytes:
        text = token.decode("utf-8", "replace")
        header, sep, bare = text.partition(",,")
        if not sep or header[:1] not in ("n", "y"):
            raise AuthenticationError("SCRAM client-first must start with a gs2 header (n,,)")
        fields = _fields(bare)
        if "n" not in fields or "r" not in fields:
            raise AuthenticationError("SCRAM client-first needs n= and r=")
        name = fields["n"].replace("=2C", ",").replace("=3D", "=")
        user = self.lookup(name)
        if user is None:
            # Answered as a user is, and refused at the proof as a wrong password is: an
            # error here would tell a client which names are users.
            salt = hmac.digest(_DECOY_KEY, f"{self.digest}:{name}".encode(), "sha256")[:16]
            salted = secrets.token_bytes(hashlib.new(self.digest).digest_size)
        else:
            salt, salted = _salted(self.digest, user.name, user.password.get_secret_value())
        nonce = fields["r"] + secrets.token_urlsafe(18)
        server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={ITERATIONS}"
        self._expected = (salted, f"{bare},{server_first}".encode(), nonce)
        self._name, self._user = name, user
        return server_first.encode()

    def final(self, token: bytes) -> bytes:
        if self._expected is None:
            raise AuthenticationError("SCRAM client-final before client-first")
        salted, first_messages, nonce = self._expected
        text = token.decode("utf-8", "replace")
        without_proof, _, proof_part = text.rpartition(",p=")
        fields = _fields(without_proof)
        if fields.get("r") != nonce or not proof_part:
            raise AuthenticationError("SCRAM client-final has the wrong nonce or no proof")
        auth_message = first_messages + b"," + without_proof.encode()
        client_key = hmac.digest(salted, b"Client Key", self.digest)
        stored_key = hashlib.new(self.digest, client_key).digest()
        signature = hmac.digest(stored_key, auth_message, self.digest)
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError as exc:
            raise AuthenticationError("SCRAM proof is not base64") from exc
        if len(proof) != len(signature):
            raise AuthenticationError("SCRAM proof has the wrong length")
        recovered = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        matches = hmac.compare_digest(hashlib.new(self.digest, recovered).digest(), stored_key)
        if self._user is None:
            raise CredentialsError(f"unknown user {self._name!r}")
        if not matches:
            raise CredentialsError(f"wrong password for user {self._user.name!r}")
        server_key = hmac.digest(salted, b"Server Key", self.digest)
        verifier = hmac.digest(server_key, auth_message, self.digest)
        self.principal = Principal(self._user.name, self._user.topics)
        return b"v=" + base64.b64encode(verifier)


@functools.lru_cache(maxsize=1024)
def _salted(digest: str, name: str, password: str) -> tuple[bytes, bytes]:
    """A user's salt and salted password, made once per process: a SCRAM server keeps one
    salted credential per user (Kafka stores it), and deriving it (4,096 rounds, 2.3 ms of
    SHA-512) ran on the listener's event loop at every login, which a crowd of reconnecting
    clients turned into a stall for every connection."""
    del name  # part of the key only: two users with one password get salts of their own
    salt = secrets.token_bytes(16)
    return salt, hashlib.pbkdf2_hmac(digest, password.encode(), salt, ITERATIONS)


def _fields(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if sep and len(key) == 1:
            found[key] = value
    return found
