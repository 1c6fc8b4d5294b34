"""Secrets never reach a command line, a log or a durable record: storage options (which
hold credentials on S3, Azure, GCS), ours or Spark's Hadoop settings, travel to workers and
to the result store's recorder on a socket or a pipe. Every process the shim starts runs
through a Python wrapper that writes down its argv, so the test sees exactly what `ps`
would have shown."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from pyrocks_support import pyrocks_session, wrapper_python
from state_store.results import FileSystemResultStore

SECRET = "S3CR3T-d41d8cd98f00b204e9800998ecf8427e"


def recording_python(tmp_path: Path) -> tuple[Path, Path]:
    """A `pythonExec` that appends its argv to a file, then runs this interpreter."""
    log = tmp_path / "argv.log"
    return wrapper_python(tmp_path / "python-wrapper", f'printf "%s\\n" "$*" >> "{log}"'), log


def test_storage_options_never_reach_argv_logs_or_records(
        tmp_path: Path, capfd) -> None:  # noqa: ANN001 - pytest's fixture
    wrapper, argv_log = recording_python(tmp_path)
    options = json.dumps({"secret_token": SECRET})
    results = tmp_path / "results"
    # Hadoop's object-store credentials travel to the workers too (format/storage/hadoop.py)
    hadoop = {"spark.hadoop.fs.s3a.secret.key": SECRET,
              "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net": SECRET}
    spark = pyrocks_session("pyrocks-secrets", tmp_path / "pool", hadoop,
                            pythonExec=str(wrapper),
                            resultStore=str(results), resultStoreOptions=options,
                            rootUrl=str(tmp_path / "state"), rootOptions=options)
    try:
        source = tmp_path / "in"
        source.mkdir()
        (source / "0.json").write_text("\n".join(json.dumps({"k": i % 3}) for i in range(9)))
        query = (spark.readStream.schema("k int").json(str(source)).groupBy("k").count()
                 .writeStream.outputMode("update").format("noop")
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(300)
        store = FileSystemResultStore(str(results))
        deadline = time.monotonic() + 120  # the recorder runs in a process of its own
        while not store.has_clean(str(query.runId)):
            assert time.monotonic() < deadline, "the run was never recorded clean"
            time.sleep(0.1)
    finally:
        spark.stop()
    started = argv_log.read_text().splitlines()
    assert any("state_store.runtime.worker" in a for a in started)  # the wrapper saw every start
    assert any("state_store.results record" in a for a in started)
    assert not [a for a in started if SECRET in a], started
    printed = capfd.readouterr()
    assert SECRET not in printed.out + printed.err
    durable = [p for p in tmp_path.rglob("*") if p.is_file() and p != argv_log
               and "pool" not in p.parts and os.access(p, os.R_OK)]
    assert durable
    assert not [p for p in durable if SECRET.encode() in p.read_bytes()]
