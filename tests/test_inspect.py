"""`state-store inspect` on local and s3:// roots: versions, snapshots, owners, sharing, and
a GC dry run that deletes nothing."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from pyrocks_support import S3Endpoint
from state_store.cli import main
from test_engine import commit_versions, open_store
from test_s3 import s3_store


def inspect(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    assert main(["inspect", *args, "--json", "--retain", "2", "--orphan-margin", "0"]) == 0
    return json.loads(capsys.readouterr().out)["stores"]


def check_report(report: dict) -> None:
    versions = [v["version"] for v in report["versions"]]
    assert versions == list(range(1, 7))
    snapshots = report["snapshots"]
    assert snapshots and all(f["owner"] == "owned" for s in snapshots for f in s["files"])
    assert any(s["bytes_shared_with_previous"] > 0 for s in snapshots[1:])
    assert any(v["bytes_shared_with_previous"] > 0 for v in report["versions"][1:])
    gc = report["gc_would_delete"]
    assert gc["manifests"] == [1, 2, 3, 4]
    assert gc["files"]


def test_inspect_local_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "ckpt" / "state" / "0" / "0"
    store = open_store(root, tmp_path / "a", interval=2)
    commit_versions(store, 6, drain=True)
    before = sorted(p.name for p in root.rglob("*"))
    (report,) = inspect(capsys, str(tmp_path / "ckpt"))
    check_report(report)
    assert sorted(p.name for p in root.rglob("*")) == before  # a dry run


def test_inspect_s3_root(s3: S3Endpoint, tmp_path: Path,
                         capsys: pytest.CaptureFixture[str]) -> None:
    root = s3.url(f"inspect-{uuid.uuid4().hex}")
    store = s3_store(s3, f"{root}/q/0/3/default", tmp_path / "a")
    commit_versions(store, 6, drain=True)
    (report,) = inspect(capsys, root, "--storage-options", json.dumps(s3.options))
    assert report["root"].endswith("/q/0/3/default")
    check_report(report)


def test_the_dry_run_uses_the_querys_own_retention_unless_told(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each manifest records the retention its run's GC uses (minBatchesToRetain, the
    orphan margin): inspect plans with it, so its dry run deletes what the query's GC would."""
    root = tmp_path / "ckpt" / "state" / "0" / "0"
    store = open_store(root, tmp_path / "a", interval=2, min_versions_to_retain=3,
                       orphan_margin_seconds=7200.0)
    commit_versions(store, 6, drain=True)
    assert main(["inspect", str(tmp_path / "ckpt"), "--json"]) == 0
    (report,) = json.loads(capsys.readouterr().out)["stores"]
    assert report["gc_settings"] == {"min_versions_to_retain": 3,
                                     "orphan_margin_seconds": 7200.0, "source": "recorded"}
    assert report["gc_would_delete"]["manifests"] == [1, 2, 3]
    assert main(["inspect", str(tmp_path / "ckpt"), "--json", "--retain", "5"]) == 0
    (report,) = json.loads(capsys.readouterr().out)["stores"]
    assert report["gc_settings"]["source"] == "given"
    assert report["gc_would_delete"]["manifests"] == [1]
