"""A json topic produced to plateau: integers beyond int64 land exact as decimal(38, 0), in a
later request and after a restart, as on the consume path (one decoder); one beyond 38 digits
is logged with the topic, partition, offset and field."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import structlog
from kio.schema.errors import ErrorCode
from structlog.testing import capture_logs

from tests.kafka_api.support import RawClient, api_config, listening, record_batch, stored
from tests.kafka_api.test_protocol import produce


def test_produced_integers_beyond_int64_land_exact(tmp_path: Path) -> None:
    topics = [{"name": "j", "partitions": 1, "format": "json", "on_error": "skip"}]
    config = api_config(tmp_path / "store", topics, durability="segment")
    requests = [
        [b'{"n": 0, "id": 12, "o": {"ref": 3}}'],
        [b'{"n": 1, "id": 18446744073709551615, "o": {"ref": 9223372036854775809}}'],
    ]
    # After a restart the stored decimal stays one; then it meets a fraction: a double.
    after_restart = [[b'{"n": 2, "id": 9223372036854775808}']]
    fraction = [[b'{"n": 3, "id": 0.5}']]
    for batches in (requests, after_restart, fraction):
        with listening(config) as (_server, bootstrap):
            client = RawClient(bootstrap)
            for values in batches:
                assert produce(client, "j", record_batch(values)).error_code == ErrorCode.none
            client.close()
        if batches is after_restart:
            exact = stored(tmp_path / "store", "j")
            assert exact.schema.field("id").type == pa.decimal128(38, 0)
            assert exact.schema.field("o").type == pa.struct([("ref", pa.decimal128(38, 0))])
            assert {r["n"]: (r["id"], r["o"] and r["o"]["ref"]) for r in exact.to_pylist()} == {
                0: (Decimal(12), Decimal(3)),
                1: (Decimal(2**64 - 1), Decimal(2**63 + 1)),
                2: (Decimal(2**63), None),
            }
    widened = stored(tmp_path / "store", "j")
    assert widened.schema.field("id").type == pa.float64()
    assert {r["n"]: r["id"] for r in widened.to_pylist()} == {
        0: 12.0,
        1: float(2**64 - 1),
        2: float(2**63),
        3: 0.5,
    }


def test_a_produced_integer_beyond_38_digits_is_logged_with_its_partition(tmp_path: Path) -> None:
    topics = [{"name": "j", "partitions": 2, "format": "json", "on_error": "skip"}]
    config = api_config(tmp_path / "store", topics, durability="segment")
    contextual = [structlog.contextvars.merge_contextvars]
    with capture_logs(processors=contextual) as logged, listening(config) as (_server, bootstrap):
        client = RawClient(bootstrap)
        batch = record_batch([b'{"n": 0, "huge": 1}', b'{"n": 1, "huge": ' + b"9" * 40 + b"}"])
        assert produce(client, "j", batch, partition=1).error_code == ErrorCode.none
        client.close()
    rounded = [e for e in logged if e["event"] == "json_integer_rounded"]
    assert [(e["topic"], e["partition"], e["offset"], e["field"]) for e in rounded] == [
        ("j", 1, 1, "huge")
    ]
    assert stored(tmp_path / "store", "j").schema.field("huge").type == pa.float64()
