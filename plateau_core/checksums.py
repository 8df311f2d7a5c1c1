"""CRC32 checksums of a segment file, by region: the head (magic and schema message), each
record batch message, and the tail (end-of-stream marker and footer).

Checksums per region rather than one per file let a reader check only the batches it
decodes, and let recovery check the cheap head and tail without reading every batch. The
regions tile the file exactly, so every byte is covered by one checksum.

This module is the record the manifest keeps (parsed from and written to JSON);
plateau_core.crc computes and checks them against a file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

_FORMAT = 1

BatchRange = tuple[int, int]  # (position, length) in bytes


class ChecksumFormatError(ValueError):
    """The checksums text recorded in the manifest cannot be parsed."""


@dataclass(frozen=True)
class Checksums:
    """CRC32s of a segment file's regions; `batches` holds (position, length, crc) per record
    batch in file order. The head is [0, first batch), the tail [last batch end, end of file).
    """

    head: int
    tail: int
    batches: tuple[tuple[int, int, int], ...]

    def to_json(self) -> str:
        body = {"v": _FORMAT, "head": self.head, "tail": self.tail, "batches": self.batches}
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Checksums:
        try:
            body = json.loads(text)
            if body.get("v") != _FORMAT:
                raise ChecksumFormatError(f"unknown checksums format {body.get('v')!r}")
            batches = tuple((int(p), int(n), int(c)) for p, n, c in body["batches"])
            return cls(head=int(body["head"]), tail=int(body["tail"]), batches=batches)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            if isinstance(exc, ChecksumFormatError):
                raise
            raise ChecksumFormatError(f"unreadable checksums: {exc}") from exc

    @property
    def head_end(self) -> int:
        return self.batches[0][0] if self.batches else 0

    @property
    def tail_start(self) -> int:
        if not self.batches:
            return 0
        position, length, _ = self.batches[-1]
        return position + length

    def tiling_problem(self, size: int) -> str | None:
        """Why the regions do not cover a file of `size` bytes exactly once, or None."""
        if not self.batches:
            return "the checksums list no record batches"
        expected = self.head_end
        if expected <= 0:
            return "the checksums leave no room for the file header"
        for i, (position, length, _) in enumerate(self.batches):
            if position != expected or length <= 0:
                return f"the checksums of batch {i} do not follow the previous region"
            expected = position + length
        if expected >= size:
            return f"the checksums' batches end at byte {expected}, past the footer of {size}"
        return None
