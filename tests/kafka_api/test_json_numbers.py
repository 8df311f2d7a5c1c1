"""A json topic produced to plateau: an inferred integer field that meets a fraction becomes
a double in a later request and after a restart, as on the consume path (one decoder)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from kio.schema.errors import ErrorCode

from tests.kafka_api.support import RawClient, api_config, listening, record_batch, stored
from tests.kafka_api.test_protocol import produce


@pytest.mark.parametrize("durability", ["journal", "segment"])
def test_produced_integers_that_meet_a_fraction_become_doubles(
    tmp_path: Path, durability: str
) -> None:
    topics = [{"name": "j", "partitions": 1, "format": "json", "on_error": "skip"}]
    config = api_config(tmp_path / "store", topics, durability=durability)
    requests = [
        [b'{"n": 0, "x": 12, "o": {"ms": 3}, "y": 1}'],
        [b'{"n": 1, "x": 12.5, "o": {"ms": 0.5}, "y": 2}', b'{"n": 2, "x": "t"}'],
        [b'{"n": 3, "x": 4}'],
    ]
    # y was stored as an int before the restart: the restarted listener widens it.
    after_restart = [b'{"n": 4, "x": 5, "y": 2.5}']
    for batches in (requests, [after_restart]):
        with listening(config) as (_server, bootstrap):
            client = RawClient(bootstrap)
            for values in batches:
                assert produce(client, "j", record_batch(values)).error_code == ErrorCode.none
            client.close()
    table = stored(tmp_path / "store", "j")
    assert table.schema.field("x").type == pa.float64()
    assert table.schema.field("o").type == pa.struct([("ms", pa.float64())])
    assert table.schema.field("y").type == pa.float64()
    rows = table.select(["n", "x", "o", "y"]).to_pylist()
    assert {r["n"]: (r["x"], r["o"] and r["o"]["ms"], r["y"]) for r in rows} == {
        0: (12.0, 3.0, 1.0),
        1: (12.5, 0.5, 2.0),
        3: (4.0, None, None),
        4: (5.0, None, 2.5),
    }
