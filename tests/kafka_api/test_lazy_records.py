"""Raw topics' produced batches kept as they came (bridge.kafka_api.lazy_records): the rows a
seal builds from them are the rows decoding them on arrival gives, for every combination
of keys, headers, timestamps and kept columns; several batches build as their concatenation;
and a batch read back from its journal payload builds the same rows."""

from __future__ import annotations

import pyarrow as pa
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from bridge.ingest.decode.raw import RawDecoder
from bridge.ingest.records import Kept
from bridge.kafka_api.batches import Placed, ProducedBatch, envelope_of, read_batch
from bridge.kafka_api.lazy_records import KafkaRecords
from plateau_core import lazy as plateau_lazy
from plateau_core.schema import normalized
from tests.kafka_api.raw_batches import Record, batch_of, encode_record, raw_batch

NOW = 1_700_000_000_999
FIRST = 1_700_000_000_000


def produced(count: int, *, keys: bool, headers: bool, unset_times: bool) -> ProducedBatch:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i in range(count):
        builder.append(
            i,
            timestamp=-1 if unset_times and i % 2 else 1_700_000_000_000 + i,
            key=b"k%d" % i if keys else None,
            value=b"value-%d" % i,
            headers=[("h", b"%d" % i)] if headers and i % 3 else [],
        )
    return read_batch(bytes(builder.build()))


def eager(placed: list[Placed], kept: Kept) -> pa.RecordBatch:
    """What the listener did before: the envelope, RawDecoder, then the writer's normalize."""
    decoded = RawDecoder(kept).decode(envelope_of(placed))
    return pa.Table.from_batches([normalized(b)[0] for b in decoded.batches]).to_batches()[0]


@pytest.mark.parametrize("keys", [True, False])
@pytest.mark.parametrize("headers", [True, False])
@pytest.mark.parametrize("unset_times", [True, False])
@pytest.mark.parametrize("log_append", [True, False])
@pytest.mark.parametrize("kept", [Kept(), Kept(key=False), Kept(headers=False)])
def test_rows_built_at_the_seal_are_the_rows_decoded_on_arrival(
    keys: bool, headers: bool, unset_times: bool, log_append: bool, kept: Kept
) -> None:
    appended = NOW - 5 if log_append else -1
    placed = [
        Placed(produced(7, keys=keys, headers=headers, unset_times=unset_times), 40, appended, NOW),
        Placed(produced(3, keys=keys, headers=headers, unset_times=unset_times), 47, appended, NOW),
    ]
    lazy = [KafkaRecords(p, kept) for p in placed]
    built = KafkaRecords.build(lazy)
    want = eager(placed, kept)
    assert built.schema.equals(want.schema, check_metadata=True)
    assert built.to_pylist() == want.to_pylist()
    assert lazy[0].fingerprint == normalized(want)[1]
    assert (lazy[0].first_offset, lazy[1].last_offset) == (40, 49)
    assert built.column("offset").to_pylist() == list(range(40, 50))


def test_a_batch_read_back_from_its_journal_payload_builds_the_same_rows() -> None:
    placed = Placed(produced(5, keys=True, headers=True, unset_times=True), 9, -1, NOW)
    original = KafkaRecords(placed, Kept(headers=False))
    payload = pa.py_buffer(b"".join(bytes(part) for part in original.payload()))
    again = KafkaRecords.load(payload)
    assert again.kept == original.kept
    assert (again.first_offset, again.last_offset, again.nbytes) == (
        original.first_offset,
        original.last_offset,
        original.nbytes,
    )
    assert KafkaRecords.build([again]).to_pylist() == KafkaRecords.build([original]).to_pylist()


def test_batches_of_two_topics_are_not_built_together() -> None:
    placed = Placed(produced(2, keys=False, headers=False, unset_times=False), 0, -1, NOW)
    with pytest.raises(TypeError, match="one topic"):
        KafkaRecords.build([KafkaRecords(placed, Kept()), KafkaRecords(placed, Kept(key=False))])


def test_a_seal_builds_many_batches_in_pieces_with_the_same_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """materialize builds a run of lazy records in pieces of about BUILD_BYTES (the
    interpreter lock is let go between them); the rows are the rows of one build, and a
    record batch among them keeps its place."""
    placed = [
        Placed(produced(4, keys=True, headers=True, unset_times=False), 4 * i, -1, NOW)
        for i in range(10)
    ]
    lazy = [KafkaRecords(p, Kept()) for p in placed]
    whole = KafkaRecords.build(lazy)
    middle = whole.slice(0, 0)  # an eager batch between two runs, with no rows
    monkeypatch.setattr(plateau_lazy, "BUILD_BYTES", 3 * lazy[0].nbytes)
    pieces = plateau_lazy.materialize([*lazy[:5], middle, *lazy[5:]])
    assert [p.num_rows for p in pieces] == [12, 8, 0, 12, 8]
    assert pa.Table.from_batches(pieces).to_pylist() == whole.to_pylist()


def test_only_unset_timestamps_take_the_arrival_time() -> None:
    # -1 is Kafka's "no timestamp"; other times before 1970 are kept, as Kafka keeps them.
    records = [
        Record(-5 - FIRST, None, b"a"),
        Record(-1 - FIRST, None, b"b"),
        Record(10, None, b"c"),
    ]
    batch = read_batch(raw_batch(records, first_timestamp=FIRST))
    stamps = [s.value for s in envelope_of([Placed(batch, 0, -1, 99)]).column("timestamp")]
    assert stamps == [-5, 99, FIRST + 10]
    appended = envelope_of([Placed(batch, 0, 7, 99)]).column("timestamp")  # LogAppendTime
    assert [s.value for s in appended] == [7, 7, 7]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_a_kept_batch_counts_its_records_decompressed(codec: int) -> None:
    """What the memory budget, the throttling and the seal's pieces go by: the records the
    seal builds from, not the batch as it came (a compressed one is many times smaller),
    and a replay from the journal counts the same."""
    region = b"".join(encode_record(Record(0, None, bytes(2000)), i) for i in range(50))
    data = batch_of(region, 50, codec=codec)
    kept = KafkaRecords(Placed(read_batch(data), 0, -1, NOW), Kept())
    assert kept.nbytes == 61 + len(region) + 512
    if codec:
        assert len(data) < len(region) / 10
    payload = pa.py_buffer(b"".join(bytes(part) for part in kept.payload()))
    assert KafkaRecords.load(payload).nbytes == kept.nbytes
