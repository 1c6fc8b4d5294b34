"""`state-store` behaves as one tool: for each subcommand, bad input ends in the documented
exit code (2 bad usage, 1 a finding) with a message naming the problem and never a
traceback, and `--json` prints exactly one JSON document, errors included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from state_store import cli
from state_store.cli import main
from test_savepoint_crashes import build_source


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def error_of(capsys: pytest.CaptureFixture[str], code: int, *args: str) -> dict:
    """Runs `args` twice, as text and with --json: both end with `code`, no traceback, and
    the JSON run prints one error document, which is returned."""
    got, out, err = run(capsys, *args)
    assert (got, out) == (code, ""), (got, out, err)
    assert "Traceback" not in err and err.startswith("state-store")
    got, out, err = run(capsys, *args, "--json")
    assert (got, err) == (code, "")
    document = json.loads(out)
    assert document["error"]["exit_code"] == code
    return document["error"]


def test_every_subcommand_has_json_and_help_shows_defaults() -> None:
    parser = cli.parser()
    for command in cli.COMMANDS:
        sub = parser._subparsers._group_actions[0].choices[command.name]  # type: ignore[union-attr]
        assert "--json" in sub.format_help(), command.name
    demo_help = subprocess.run([sys.executable, "-m", "state_store.cli", "demo", "--help"],
                               capture_output=True, text=True, check=True).stdout
    assert "(default: 8)" in demo_help and "(default: pyrocks-demo)" in demo_help


def test_version_and_bad_usage_at_the_top(capsys: pytest.CaptureFixture[str]) -> None:
    version = subprocess.run([sys.executable, "-m", "state_store.cli", "--version"],
                             capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("state-store ")
    assert "pyspark" in version.stdout
    assert error_of(capsys, 2, "no-such-command")["type"] == "UsageError"
    code, _, err = run(capsys)
    assert code == 2 and "required: COMMAND" in err


@pytest.mark.parametrize(("args", "code", "says"), [
    (["demo", "--batches", "many"], 2, "invalid int value: 'many'"),
    (["conf", "snapshotIntervall=3"], 2, "unknown option"),
    (["conf", "snapshotInterval=0"], 2, "must be >= 1"),
    (["conf", "no-equals-sign"], 2, "expected KEY=VALUE"),
    (["inspect", "memory://state"], 2, "no atomic put-if-absent"),
    (["inspect", ".", "--storage-options", "{bad json"], 2, "--storage-options: not JSON"),
    (["inspect", ".", "--retain", "-1"], 2, "must be >= 0"),
    (["savepoint", "missing-checkpoint", "sp"], 1, "neither a savepoint"),
    (["savepoint", "missing-checkpoint", "sp", "--format", "zip"], 2, "invalid choice"),
    (["restore", "sp", "new", "--claim-mode", "KEEP"], 2, "is not a claim mode"),
    (["restore", "missing-savepoint", "new"], 1, "missing-savepoint"),
    (["stop", "missing-checkpoint"], 2, "--savepoint-path"),
    (["stop", "missing-checkpoint", "-p", "sp"], 1, "not a streaming query's checkpoint"),
    (["dispose", "."], 1, "is not a savepoint"),
    (["results", "missing-store"], 1, "no result store at"),
    (["results", "missing-store", "--storage-options", "[1]"], 2, "not a JSON object"),
])
def test_bad_input_gets_its_exit_code_and_a_message(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        args: list[str], code: int, says: str) -> None:
    monkeypatch.chdir(tmp_path)
    error = error_of(capsys, code, *args)
    assert says in error["message"], error


def test_inspect_says_what_it_found(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert error_of(capsys, 1, "inspect", str(tmp_path / "nothing"))["type"] == "NotFound"
    assert error_of(capsys, 1, "inspect", str(tmp_path))["type"] == "NoState"


def test_a_stop_nobody_answers_times_out_and_leaves_no_request(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text('{"id": "q"}\n')
    error = error_of(capsys, 1, "stop", str(checkpoint), "-p", str(tmp_path / "sp"),
                     "--timeout", "0.3")
    assert error["type"] == "StopTimeoutError" and "nothing was stopped" in error["message"]
    assert sorted(p.name for p in checkpoint.iterdir()) == ["metadata"]
    assert not (tmp_path / "sp").exists()


def test_dispose_deletes_a_savepoint_nobody_owns_and_refuses_a_claimed_one(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source, _ = build_source(tmp_path)
    for name in ("sp", "sp2"):
        assert run(capsys, "savepoint", source, str(tmp_path / name), "--json")[0] == 0
    # a NO_CLAIM restore needs nothing of the savepoint once it returned
    assert run(capsys, "restore", str(tmp_path / "sp"), str(tmp_path / "kept"))[0] == 0
    code, out, _ = run(capsys, "dispose", str(tmp_path / "sp"), "--json")
    assert code == 0 and json.loads(out)["batch"] == 3 and not (tmp_path / "sp").exists()
    code, out, _ = run(capsys, "inspect", str(tmp_path / "kept"), "--json")
    assert code == 0 and json.loads(out)["depends_on"] == []

    assert run(capsys, "restore", str(tmp_path / "sp2"), str(tmp_path / "owner"),
               "--claim-mode", "CLAIM")[0] == 0  # Flink's spelling
    error = error_of(capsys, 1, "dispose", str(tmp_path / "sp2"))
    assert "claimed by query" in error["message"] and (tmp_path / "sp2").exists()


def test_json_documents_of_conf_options_and_build_shim(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "conf", "snapshotInterval=20", "writeBatchBytes=128k", "--json")
    conf = json.loads(out)
    assert code == 0
    assert conf["spark.sql.streaming.stateStore.pyrocks.writeBatchBytes"] == "131072"
    code, out, _ = run(capsys, "options", "--json")
    listed = json.loads(out)
    assert code == 0 and any(o["key"].endswith(".compression") for o in listed["options"])
    assert any(s["key"].endswith("rocksdb.compression") for s in listed["spark_settings"])
    code, out, _ = run(capsys, "build-shim", "--json")
    assert code == 0 and Path(json.loads(out)["jar"]).is_file()
