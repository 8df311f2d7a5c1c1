"""Where the Kafka API listener's time per Produce request goes, by function: listener_probe's
requests (the Java client's defaults at 1 KiB, or the shape its options say) with chosen
functions of the handler, sink, writer and journal timed on every call.

Each function is wrapped to time its calls with perf_counter_ns (a clock read, not a system
call, so the wrapper adds about 0.2-0.3 us per call, which the callers' figures include);
reported is each function's calls per request and its median call times that. Unlike
cProfile, which costs every Python call the same and so inflates the many small ones, this
times only the functions named, and a median leaves out the calls the machine interrupted.
Nested functions are included in their callers' figures.

    .venv/bin/python bench/listener_sections.py --requests 1500 --rounds 2
    .venv/bin/python bench/listener_sections.py --requests 1000 --rounds 2 --size 128 --records 115
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib
import inspect
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import listener_probe

# (module, class or None, function): what the listener does per request, outermost first.
TARGETS = [
    ("bridge.kafka_api.protocol", None, "parse_request"),
    ("bridge.kafka_api.produce", "ProduceHandler", "accept"),
    ("bridge.kafka_api.produce", "ProduceHandler", "_refusal"),
    ("bridge.kafka_api.produce", None, "split_batches"),
    ("bridge.kafka_api.produce", None, "read_batch"),
    ("bridge.kafka_api.batches", None, "check_records"),
    ("bridge.kafka_api.produce", "ProduceHandler", "_ahead"),
    ("bridge.kafka_api.sink", "ProduceSink", "append"),
    ("plateau_core.writer", "Writer", "accepting"),
    ("bridge.kafka_api.partition", "ProducedPartition", "check_producer"),
    ("bridge.kafka_api.partition", "ProducedPartition", "remember"),
    ("bridge.kafka_api.lazy_records", "KafkaRecords", "__init__"),
    ("bridge.kafka_api.partition", "ProducedPartition", "durable"),
    ("bridge.kafka_api.landing", "Landing", "land"),
    ("plateau_core.writer", "Writer", "append_group"),
    ("plateau_core.writer", None, "_prepared"),
    ("plateau_core.writer", None, "admit"),
    ("plateau_core.slog", "SegmentLog", "add"),
    ("plateau_core.journal", "Journal", "append"),
    ("plateau_core.writer", "Writer", "seal_due"),
    ("bridge.kafka_api.partition", "Ticket", "arm"),
    ("bridge.kafka_api.landing", "Landing", "journaled"),
    ("bridge.kafka_api.produce", "ProduceHandler", "_settle"),
    ("bridge.kafka_api.produce", None, "_response"),
    ("bridge.kafka_api.requests", "RequestHandler", "_encode"),
]

calls: dict[str, list[int]] = collections.defaultdict(list)
timing = [False]  # only the measured requests, not the warm-up


def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def waited(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter_ns()
            result = await function(*args, **kwargs)
            if timing[0]:
                calls[name].append(time.perf_counter_ns() - started)
            return result

        return waited

    @functools.wraps(function)
    def called(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter_ns()
        result = function(*args, **kwargs)
        if timing[0]:
            calls[name].append(time.perf_counter_ns() - started)
        return result

    return called


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=2)
    # The request's shape (--size, --records, --batches, --topic-partitions) goes to
    # listener_probe as it is.
    args, shape = parser.parse_known_args(argv)
    # Before the server is built: the sink binds Landing.land when it is made.
    for module, owner, attribute in TARGETS:
        found = importlib.import_module(module)
        holder = getattr(found, owner) if owner else found
        name = f"{owner}.{attribute}" if owner else attribute
        setattr(holder, attribute, timed(name, getattr(holder, attribute)))
    drive = listener_probe.drive

    async def measured(server: Any, requests: list[bytes], profile: Any) -> Any:
        timing[0] = len(requests) > listener_probe.WARMUP
        try:
            return await drive(server, requests, profile)
        finally:
            timing[0] = False

    listener_probe.drive = measured
    listener_probe.main(["--requests", str(args.requests), "--rounds", str(args.rounds), *shape])
    requests = args.requests * args.rounds
    for _, owner, attribute in TARGETS:
        name = f"{owner}.{attribute}" if owner else attribute
        found = calls.get(name)
        if not found:
            continue
        median = statistics.median(found) / 1000
        per_request = len(found) / requests
        print(
            f"{name:36s} {per_request:5.1f} calls/request  {median:7.2f} us each  "
            f"{median * per_request:7.1f} us/request"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
