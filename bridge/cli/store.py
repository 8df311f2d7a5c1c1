"""`plateau verify | rebuild-manifest | drop-topic`: checking the store's files, recovering
from a lost or corrupted manifest, and removing a topic the config no longer names."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from bridge.cli.serve import config_argument

if TYPE_CHECKING:
    from bridge.config.models import Config


def add_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verify_parser = subparsers.add_parser(
        "verify",
        help="check every segment file against the manifest and its checksums "
        "(exit 1 when anything is wrong)",
    )
    config_argument(verify_parser)
    verify_parser.add_argument(
        "--deep", action="store_true", help="also decode and validate every record batch"
    )
    verify_parser.add_argument(
        "--quarantine",
        action="store_true",
        help="mark bad segments quarantined, so queries and replication exclude them",
    )
    verify_parser.add_argument(
        "--forget-quarantined",
        action="store_true",
        help="once you gave up on quarantined segments: hand them to retention, which "
        "deletes their files after storage.deletion_grace and drops their rows",
    )
    verify_parser.add_argument("--json", action="store_true", help="one JSON object")
    verify_parser.set_defaults(handler=_verify)

    rebuild_parser = subparsers.add_parser(
        "rebuild-manifest",
        help="rebuild a lost or corrupted manifest from the segment files (serve stopped)",
    )
    config_argument(rebuild_parser)
    rebuild_parser.add_argument(
        "--yes", action="store_true", help="do it without asking for confirmation"
    )
    rebuild_parser.set_defaults(handler=_rebuild)

    drop_parser = subparsers.add_parser(
        "drop-topic",
        help="delete the segments of a topic the config does not name (removed from "
        "topics, a roll-up no longer declared, created through the Kafka API)",
    )
    config_argument(drop_parser)
    drop_parser.add_argument("topic", help="the plateau topic, as plateau status lists it")
    drop_parser.add_argument(
        "--yes", action="store_true", help="do it without asking for confirmation"
    )
    drop_parser.set_defaults(handler=_drop_topic)


def _verify(args: argparse.Namespace) -> int:
    from bridge.config import load_config
    from bridge.store import open_store
    from plateau_core.errors import ManifestUnusableError
    from plateau_core.verify import forget_quarantined, verify_store

    config = load_config(args.config)
    try:
        store = open_store(config)
    except ManifestUnusableError as exc:
        if args.json:
            print(json.dumps({"clean": False, "manifest_problems": [str(exc)]}, indent=2))
        else:
            print(f"manifest: {exc}")
        return 1
    try:
        forgotten = forget_quarantined(store) if args.forget_quarantined else 0
        report = verify_store(store, deep=args.deep, quarantine=args.quarantine)
    finally:
        store.close()
    if forgotten:
        print(
            f"{forgotten} quarantined segment(s) handed to retention: files deleted after "
            f"storage.deletion_grace ({config.storage.deletion_grace:g}s)",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print("\n".join(report.lines()))
    return 0 if report.clean else 1


def _rebuild(args: argparse.Namespace) -> int:
    from bridge.config import load_config
    from plateau_core.rebuild import rebuild_manifest

    config = load_config(args.config)
    if not args.yes and not _confirmed(config):
        print("plateau rebuild-manifest: not confirmed; nothing changed", file=sys.stderr)
        return 2
    report = rebuild_manifest(config.storage.data_dir, config.storage.manifest_url)
    print("\n".join(report.lines()))
    return 0


def _drop_topic(args: argparse.Namespace) -> int:
    from bridge.config import load_config
    from bridge.config.naming import naming
    from bridge.store import open_store
    from plateau_core import Retention, SegmentState, StoreLimits
    from plateau_core.topic_drop import DROPPABLE, drop_topic

    config = load_config(args.config)
    topic: str = args.topic
    named = naming(config, topic)
    if named is not None:
        print(
            f"plateau drop-topic: the config names {topic!r} ({named.said}): retention keeps "
            "it by the config; remove it from the config (and restart serve) first",
            file=sys.stderr,
        )
        return 2
    grace = config.storage.deletion_grace
    with open_store(config) as store:
        if topic not in store.topics():
            print(f"plateau drop-topic: the store holds no topic {topic!r}", file=sys.stderr)
            return 2
        rows = store.manifest.segments(topic, states=DROPPABLE)
        size = sum(row.size_bytes for row in rows)
        said = f"{len(rows)} segments ({size:,} bytes) of topic {topic!r}"
        if rows and not args.yes and not _drop_confirmed(said):
            print("plateau drop-topic: not confirmed; nothing changed", file=sys.stderr)
            return 2
        dropped = drop_topic(store, topic)
        # What waited out its grace goes now, as a retention pass of serve would remove it:
        # run again after the grace, the command finishes its own drop without serve.
        Retention(store, limits=StoreLimits(deletion_grace_s=grace)).run()
        waiting = store.manifest.segments(topic, states=(SegmentState.DELETING,))
        produced = topic in store.manifest.produced_topics()
    print(
        f"dropped {len(dropped)} segments ({sum(r.size_bytes for r in dropped):,} bytes) of "
        f"topic {topic!r}; the partitions keep their watermarks"
    )
    if waiting:
        print(
            f"{len(waiting)} files wait out storage.deletion_grace ({grace:g}s) for running "
            "queries: serve's retention removes them then, or run this command again"
        )
    if produced and config.kafka_api is not None:
        print(
            f"the Kafka API still serves {topic!r} (the manifest records it as produced): "
            "producers can write to it again, and what they write lands"
        )
    return 0


def _drop_confirmed(said: str) -> bool:
    """Say what will be deleted, then ask; without a terminal to ask on, --yes is required."""
    print(
        f"This deletes {said} from the store: queries no longer see them, and their files "
        "go after storage.deletion_grace. Kafka's copies, if any, are not touched."
    )
    if not sys.stdin.isatty():
        print("Pass --yes to proceed.", file=sys.stderr)
        return False
    return input("Drop the topic's segments? [y/N] ").strip().lower() in ("y", "yes")


def _confirmed(config: Config) -> bool:
    """Say what will happen, then ask; without a terminal to ask on, --yes is required."""
    from plateau_core.manifest.urls import shown_url
    from plateau_core.names import segment_files

    data_dir = config.storage.data_dir
    files = sum(1 for _ in segment_files(data_dir))
    url = config.storage.manifest_url
    target = shown_url(url) if url else f"{data_dir}/manifest.db"
    print(
        f"This replaces the manifest ({target}) with one rebuilt from the {files} segment "
        f"files under {data_dir}/topics. An SQLite manifest is renamed to *.broken-<time>, "
        "not deleted. Replication state and recorded gaps are not in the files and are lost. "
        "plateau serve must be stopped."
    )
    if not sys.stdin.isatty():
        print("Pass --yes to proceed.", file=sys.stderr)
        return False
    return input("Rebuild the manifest? [y/N] ").strip().lower() in ("y", "yes")
