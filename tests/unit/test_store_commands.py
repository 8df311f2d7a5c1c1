"""`plateau verify` and `plateau rebuild-manifest` on a store written without Kafka."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bridge.cli import main
from plateau_core import Retention, SegmentState, Store, StoreLimits, WriterPolicy
from tests.support import batch


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "plateau.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": "127.0.0.1:1", "group_id": "g"},
                "storage": {"data_dir": "data"},
                "topics": [{"source": "t"}],
            }
        )
    )
    with Store.open(tmp_path / "data") as store:
        writer = store.writer(WriterPolicy(fsync=False))
        writer.acquire("t", 0)
        for start in (0, 10, 20):
            writer.append("t", 0, batch(range(start, start + 10)))
            writer.flush()
        writer.close()
    return path


def test_verify_exits_0_when_clean_and_1_naming_the_damage(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", "--config", str(config)]) == 0
    assert "clean" in capsys.readouterr().out
    victim = config.parent / "data/topics/t/0/00000000000000000010.arrow"
    victim.write_bytes(victim.read_bytes()[:-10])
    assert main(["verify", "--config", str(config), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [p["path"] for p in report["problems"]] == ["topics/t/0/00000000000000000010.arrow"]
    assert not report["problems"][0]["quarantined"]
    assert main(["verify", "--config", str(config), "--quarantine", "--deep"]) == 1
    assert "quarantined now" in capsys.readouterr().out
    assert main(["verify", "--config", str(config)]) == 1  # still listed as quarantined
    # Given up on: handed to retention, excluded from now on, and verify is clean again.
    assert main(["verify", "--config", str(config), "--forget-quarantined"]) == 0
    assert "1 quarantined segment(s) handed to retention" in capsys.readouterr().err
    with Store.open(config.parent / "data") as store:
        (row,) = store.manifest.segments("t", states=(SegmentState.DELETING,))
        assert row.path == "topics/t/0/00000000000000000010.arrow"
        Retention(store, limits=StoreLimits(deletion_grace_s=0)).run()
        assert store.manifest.segments("t", states=tuple(SegmentState))[1].start_offset == 20
    assert not victim.exists()


def test_verify_reports_a_lost_manifest(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("manifest.db", "manifest.db-wal", "manifest.db-shm"):
        (config.parent / "data" / name).unlink(missing_ok=True)
    assert main(["verify", "--config", str(config)]) == 1
    assert "plateau rebuild-manifest" in capsys.readouterr().out


def test_rebuild_manifest_needs_yes_without_a_terminal(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (config.parent / "data/manifest.db").unlink()
    assert main(["rebuild-manifest", "--config", str(config)]) == 2
    captured = capsys.readouterr()
    assert "3 segment files" in captured.out
    assert "--yes" in captured.err
    assert main(["rebuild-manifest", "--config", str(config), "--yes"]) == 0
    assert "3 segments recorded" in capsys.readouterr().out
    with Store.open(config.parent / "data") as store:
        assert store.manifest.watermark("t", 0) == 30


def test_rebuild_manifest_does_not_print_the_manifest_password(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = yaml.safe_load(config.read_text())
    settings["storage"]["manifest_url"] = "postgresql://plateau:hunter2-pw@127.0.0.1:1/plateau"
    config.write_text(yaml.safe_dump(settings))
    assert main(["rebuild-manifest", "--config", str(config)]) == 2
    captured = capsys.readouterr()
    assert "postgresql://plateau:***@127.0.0.1:1/plateau" in captured.out
    assert "hunter2-pw" not in captured.out + captured.err
