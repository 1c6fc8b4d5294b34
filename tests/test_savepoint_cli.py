"""`state-store savepoint` / `restore` / `inspect` as a person runs them: results, errors
that name the problem, a progress bar only where someone watches."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from state_store.cli import main
from state_store.format.storage import absolute_url
from state_store.tools.progress import Progress
from test_savepoint_crashes import SOURCE_ID, build_source


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_savepoint_restore_and_inspect_from_the_command_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, _ = build_source(tmp_path)
    code, out, err = run(capsys, "savepoint", source, str(tmp_path / "sp"), "--json")
    assert code == 0 and err == ""  # --json: no bar, nothing but the result
    info = json.loads(out)
    assert (info["batch"], info["source_query_id"], info["stores"]) == (3, SOURCE_ID, 2)

    code, out, _ = run(capsys, "inspect", info["path"], "--json")
    assert code == 0 and json.loads(out)["verified"] is True

    code, out, _ = run(capsys, "restore", info["path"], str(tmp_path / "new"), "--mode",
                       "claim", "--json")
    assert code == 0
    claimed = json.loads(out)
    assert claimed["mode"] == "claim" and claimed["query_id"] != SOURCE_ID

    code, out, err = run(capsys, "restore", info["path"], str(tmp_path / "other"))
    assert code == 1 and f"claimed by query {claimed['query_id']}" in err

    code, out, _ = run(capsys, "inspect", info["path"])
    assert code == 0 and f"CLAIMED by query {claimed['query_id']}" in out

    code, out, _ = run(capsys, "inspect", str(tmp_path / "new"), "--json")
    report = json.loads(out)
    assert report["depends_on"] == [info["path"]]  # no store has opened yet
    assert report["restored_from"]["query_id"] == claimed["query_id"]


def test_errors_name_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, _ = build_source(tmp_path)
    code, _, err = run(capsys, "savepoint", source, str(tmp_path / "sp"), "--batch", "7")
    assert code == 1 and "batch 7" in err and "not committed" in err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("mine")
    code, _, err = run(capsys, "savepoint", source, str(tmp_path / "busy"))
    assert code == 1 and "is not empty" in err
    code, _, err = run(capsys, "restore", str(tmp_path / "nothing-here"), str(tmp_path / "n"))
    assert code == 1 and "neither a savepoint" in err


def test_progress_bar_draws_on_a_terminal_stream_only() -> None:
    shown = io.StringIO()
    bar = Progress("savepoint x", total_bytes=200, total_files=2, out=shown)
    bar.advance(100)
    bar.advance(100)
    bar.close()
    assert "100.0%" in shown.getvalue() and "2/2 files" in shown.getvalue()
    quiet = Progress.for_terminal("savepoint x", 200, 2, quiet=True)
    assert quiet.out is None


@pytest.mark.parametrize(("given", "expected"), [
    ("file:/tmp/ckpt", "/tmp/ckpt"),  # how Spark names a local checkpoint
    ("file:///tmp/ckpt/", "/tmp/ckpt"),
    ("/tmp/ckpt", "/tmp/ckpt"),
    ("s3://bucket/ckpt/", "s3://bucket/ckpt"),
])
def test_sources_and_targets_are_named_absolutely(given: str, expected: str) -> None:
    assert absolute_url(given) == expected
