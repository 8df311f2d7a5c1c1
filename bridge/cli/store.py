"""`plateau verify | rebuild-manifest`: checking the store's files, and recovering from a lost
or corrupted manifest."""

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
