from collections.abc import Callable, Sequence
from typing import Any

def build(
    batches: Sequence[tuple[bytes | memoryview, bytes | None, int, int, int]],
    allocate: Callable[[int], Any],
) -> dict[str, Any]: ...
def check(data: bytes | memoryview, region: bytes | None) -> tuple[int, int]: ...
