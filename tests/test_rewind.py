"""A user rewinds a checkpoint to reprocess a batch: deletes its last offsets and commit (and
the file source's log entry), changes the batch's input, and restarts. Spark's providers
overwrite the batch's state version; ours must answer exactly as they do, batch by batch,
with the new input (the later run supersedes the version, manifest.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import urlparse

import pytest
from pyspark.errors import StreamingQueryException

from harness import (
    HDFS,
    PROVIDER_KEY,
    Outputs,
    SavedRun,
    assert_same_outputs,
    checkpoint_of,
    make_spark,
    start_query,
)
from pyrocks_support import pyrocks_conf
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot
from streaming_queries import BY_NAME, rows_for, write_batch

SPECS = [BY_NAME[name] for name in ("agg_update", "window_append", "dedup_watermark",
                                     "join_left_outer", "session_window")]


def rewind(work: Path) -> dict[str, int]:
    """For every query: deletes the offsets and commits of the last batch that read input
    (and of any batch after it, e.g. a no-data batch the watermark called for) and that
    batch's file-source log entry, and replaces the input file it read with other rows.
    Returns the rewound batch of each query."""
    rewound = {}
    for spec in SPECS:
        checkpoint = checkpoint_of(work, spec)
        sources = checkpoint / "sources" / "0"
        last = max(int(p.name) for p in sources.iterdir() if p.name.isdigit())
        read = [json.loads(line)["path"] for line in
                (sources / str(last)).read_text().splitlines()[1:]]
        for log in ("offsets", "commits"):
            for entry in (checkpoint / log).iterdir():
                if entry.name.isdigit() and int(entry.name) >= last:
                    entry.unlink()
                    (checkpoint / log / f".{entry.name}.crc").unlink(missing_ok=True)
        (sources / str(last)).unlink()
        (sources / f".{last}.crc").unlink(missing_ok=True)
        (path,) = read
        name = Path(urlparse(path).path)
        other = rows_for(int(name.stem) + 50)  # other keys, values and event times
        name.write_text("\n".join(json.dumps(r) for r in other) + "\n")
        rewound[spec.name] = last
    return rewound


def run_with_rewind(work: Path, conf: dict[str, str],
                    source: SavedRun) -> tuple[Outputs, dict[str, int]]:
    """The input files before `source`'s cut (its saved run, resumed), rewind (the batch that
    read the last of them), then the rewound batch again (on its new input) and the files
    after it, up to file 6."""
    first_run = source.cut
    source.resume_in(work, SPECS)
    outputs = source.up_to_cut([spec.name for spec in SPECS])
    rewound = rewind(work)
    spark = make_spark(conf)
    try:
        queries = [start_query(spark, spec, work, outputs[spec.name]) for spec in SPECS]
        try:
            for batch in range(first_run - 1, 7):
                if batch >= first_run:  # the rewound file's new rows are in place already
                    for spec in SPECS:
                        write_batch(work / spec.name / "input", batch)
                for query in queries:
                    query.processAllAvailable()
        finally:
            for query in queries:
                query.stop()
    finally:
        spark.stop()
    return outputs, rewound


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, hdfs_run: SavedRun) -> Outputs:
    work = tmp_path_factory.mktemp("hdfs")
    return run_with_rewind(work, {**pyrocks_conf(work / "pool"), PROVIDER_KEY: HDFS},
                           hdfs_run)[0]


def test_a_rewound_batch_is_answered_as_spark_answers_it(reference: Outputs, ours_run: SavedRun,
                                                         tmp_path: Path) -> None:
    ours, rewound = run_with_rewind(tmp_path, pyrocks_conf(tmp_path / "pool"), ours_run)
    # The rerun of batch 3 saw the new input (it differs from the first run's batch 3).
    assert_same_outputs(reference, ours)
    # Each rewound store version was published again by the later run, which superseded it.
    for spec in SPECS:
        checkpoint = checkpoint_of(tmp_path, spec)
        runs = sorted(p.name for p in (checkpoint / "_pyrocks_runs").iterdir()
                      if not p.name.startswith("."))
        assert runs == ["0000000001", "0000000002"]  # one epoch per run, as it started
        roots = [r for r in (checkpoint / "state").glob("*/*/**/query-*")
                 if (r / "manifests").is_dir()]
        assert roots
        for root in roots:
            durable = StoreRoot(open_storage(str(root)), "s")
            version = rewound[spec.name] + 1
            assert durable.read_manifest(version).epoch == 2, root  # the rerun's


def test_a_run_below_the_stores_epoch_fails_clearly_never_silently(tmp_path: Path,
                                                                   ours_run: SavedRun) -> None:
    """Writers of an earlier run are fenced: once a later run published a store's state,
    an earlier run's attempt publishes nothing. A current run meets that only if its run
    epochs were mislaid (here: deleted by hand): it fails naming them, never loses state
    silently."""
    conf = pyrocks_conf(tmp_path / "pool")
    run_with_rewind(tmp_path, conf, ours_run)  # two runs: the stores hold run epoch 2 now
    for spec in SPECS:
        shutil.rmtree(checkpoint_of(tmp_path, spec) / "_pyrocks_runs")
    spark = make_spark(conf)
    try:
        spec = SPECS[0]
        query = start_query(spark, spec, tmp_path, {})
        write_batch(tmp_path / spec.name / "input", 7)
        with pytest.raises(StreamingQueryException, match=r"a later run of this query \(run "
                                                          r"epoch 2\).*_pyrocks_runs"):
            query.processAllAvailable()
        query.stop()
    finally:
        spark.stop()
