"""Queries whose state is on the object stores (S3 as s3a://, Azure as abfss://, GCS as
gs://, each on loopback) configured the way a Spark user already has it: the state URL in
our `rootUrl`, the credentials and endpoints in Spark's Hadoop settings only
(`spark.hadoop.fs.s3a.*`, `fs.azure.*`, `fs.gs.*`), no option of ours. Batch by batch they
give Spark's HDFS provider's answers across a restore from a savepoint on the store,
NO_CLAIM for some queries of each store and CLAIM for the others, each with a new query id
and the old checkpoint deleted; and a canonical savepoint reads one's whole state back off
the store.

The catalogue's queries are shared out among the three stores (each gets aggregation,
a join or dedup, and Python state or windows), all in one run: a query keeps the conf it
started with, so each starts with its own store's rootUrl.

(Spark itself cannot write a checkpoint to these URLs here: pyspark ships no S3A, ABFS or
GCS connector. So the checkpoint is on local disk and the state on the emulator.)"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from pathlib import Path

from benchmarks.emulators import Azurite, FakeGcs
from harness import Outputs, assert_same_outputs, checkpoint_of, make_spark, run_queries
from pyrocks_support import S3Endpoint, pyrocks_conf
from state_store.format.manifest import MANIFEST_DIR
from state_store.format.seeding import CLAIM, NO_CLAIM
from state_store.format.storage import open_storage
from state_store.format.store_root import query_dir
from state_store.options import PREFIX
from state_store.savepoint import restore, savepoint
from state_store.savepoint.layout import DESCRIPTOR, SavepointDescriptor
from streaming_queries import BY_NAME, QUERIES, QuerySpec

SHARES = {"s3": ("agg_update", "join_inner", "apply_in_pandas_with_state", "dedup_watermark"),
          "azure": ("agg_complete", "join_left_outer", "window_append"),
          "gcs": ("dedup_within_watermark", "session_window", "apply_in_pandas_event_timeout")}


def test_every_operator_with_state_on_an_object_store_matches_hdfs(
        hdfs_reference: Outputs, s3: S3Endpoint, azurite: Azurite, fake_gcs: FakeGcs,
        tmp_path: Path) -> None:
    assert sorted(n for share in SHARES.values() for n in share) == sorted(BY_NAME)
    servers = {"s3": s3, "azure": azurite, "gcs": fake_gcs}
    store_of = {name: servers[kind] for kind, share in SHARES.items() for name in share}
    roots = {kind: server.hadoop_url(f"queries-{uuid.uuid4().hex[:8]}")
             for kind, server in servers.items()}
    root_of = {name: roots[kind] for kind, share in SHARES.items() for name in share}
    conf = pyrocks_conf(tmp_path / "pool", snapshotInterval=2)
    for server in servers.values():
        conf |= {f"spark.hadoop.{key}": value for key, value in server.hadoop.items()}
    query_ids: dict[str, list[str]] = {spec.name: [] for spec in QUERIES}

    def own_root(spec: QuerySpec) -> dict[str, str]:
        # S3's queries also run with a 1 MiB read cache, which keeps overflowing
        cache = "1" if store_of[spec.name] is s3 else "64"
        return {PREFIX + "rootUrl": root_of[spec.name], PREFIX + "readCacheMB": cache}

    def restore_each(phase: int) -> None:
        del phase  # one restart, after batch 3
        for spec in QUERIES:
            server, root = store_of[spec.name], root_of[spec.name]
            share = next(share for share in SHARES.values() if spec.name in share)
            mode = (NO_CLAIM, CLAIM)[share.index(spec.name) % 2]  # both modes on each store
            options = server.options  # what a user passes our Python tools
            checkpoint = checkpoint_of(tmp_path, spec)
            target = server.url(f"savepoints-{uuid.uuid4().hex[:8]}/{spec.name}")
            info = savepoint(str(checkpoint), target, target_options=options, root_url=root,
                             root_options=options)
            shutil.rmtree(checkpoint)
            restored = restore(info.path, str(checkpoint), mode, storage_options=options,
                               target_root_url=root, target_root_options=options)
            query_ids[spec.name].append(restored.query_id)

    ours = run_queries(QUERIES, tmp_path, conf, restart_after=4, between_phases=restore_each,
                       query_conf=own_root)
    assert_same_outputs(hdfs_reference, ours)
    # A canonical savepoint reads each store through Spark's state data source, whose
    # provider (ours) reads the state off the object store: every row of the final state.
    complete = BY_NAME["agg_complete"]  # complete mode: its last output is its whole state
    spark = make_spark({**conf, **own_root(complete)})
    try:
        info = savepoint(str(checkpoint_of(tmp_path, complete)), str(tmp_path / "canonical"),
                         format="canonical", spark=spark)
        assert info.format == "canonical" and info.stores > 0
    finally:
        spark.stop()
    descriptor = SavepointDescriptor.from_json(
        (tmp_path / "canonical" / DESCRIPTOR).read_bytes(), "the canonical savepoint")
    assert sum(s.rows for s in descriptor.canonical_stores if s.store_name == "default") == \
        len(ours[complete.name][max(ours[complete.name])]) > 0
    # Each store's files, in one listing: a glob per query walks the store's directories.
    on_store = {root: open_storage(root, servers[kind].options).find("")
                for kind, root in roots.items()}
    for spec in QUERIES:  # the last runs are the restored query's, its state on the store
        (restored,) = query_ids[spec.name]
        checkpoint = checkpoint_of(tmp_path, spec)
        assert json.loads((checkpoint / "metadata").read_text())["id"] == restored
        manifests = rf"([^/]+/){{4}}{re.escape(query_dir(restored))}/{MANIFEST_DIR}/[^/]+\.json"
        assert any(re.fullmatch(manifests, p) for p in on_store[root_of[spec.name]]), spec.name
        assert not list((checkpoint / "state").glob("**/manifests"))

