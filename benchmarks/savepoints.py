"""Savepoints: taking one and restoring from it, against a recursive fsspec copy.

    python -m benchmarks.savepoints            # 1M and 5M keys, local disk, S3, Azure, GCS
                                               # (5 repeats)
    python -m benchmarks.savepoints --quick    # 100k and 200k keys, 2 repeats

Per size and storage, a build process runs a real streaming query on this provider
(`groupBy(key)` count/sum, update mode, local[2], 8 shuffle partitions): 4 batches insert
every key, 2 more update 20k random keys each, then it stops (the session's stop writes each
store's final snapshot). On an object store the query keeps its state under rootUrl on a
server on loopback (S3: moto, `s3server.py`; Azure: Azurite; GCS: fake-gcs-server;
`emulators.py`) and its checkpoint on local disk, and the savepoints go to that store. The
build's median commit time per batch is reported beside (Spark's `commitTimeMs`).

Then, in this process (no JVM), each repeat measures on that same built checkpoint:
  copy       what a user does today: a recursive fsspec copy of the checkpoint directory
             (`LocalFileSystem.copy(src, dst, recursive=True)`); on S3 the same through
             s3fs: the local checkpoint directory `put(recursive=True)` and the query's
             state prefix under rootUrl `copy(recursive=True)` (server-side copies).
  savepoint  `savepoint(checkpoint, new target)`: Spark's files of the last batch and one
             version per store, duplicated (hard links locally, server-side copies on S3).
  restore    `restore(savepoint, new checkpoint)`, no-claim: Spark's small files, one seed
             per store, and each store's version copied and verified (hard links read back
             locally; on S3 server-side copies under the query's rootUrl, verified by the
             CRC32 S3 computes): O(files) requests, no state byte through the process on S3.
  seeding    what the restored query's first open of each store adds: nothing locally (the
             restore copied each store into its root); on S3, `apply_seed` per store moves
             the staged copy into the store's root (server-side copies), one store after
             another, timed together. A real query runs them in its task slots.
Each repeat restores its savepoint 3 times (fresh checkpoints; the first is seeded). Times
are medians over the repeats (min also kept); ratios are ours / copy. No timed step
fsyncs, on either side: locally a copy lands in the page cache and is written back later,
so its time is a lower bound of its I/O. Locally each step's output is then fsynced, timed
apart (`then fsync`, never in the step's time; the build is synced first), to show the
writeback each leaves behind. On S3, moto runs on the same cores as this process and its
copies cost its CPU. The goals in `targets()` are this benchmark's own: no slower than the
copy, and a restore time flat in the state's size.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import fsspec

from benchmarks import report
from benchmarks.child import run_module_child
from benchmarks.emulators import Azurite, FakeGcs
from benchmarks.macro import batch_metrics, insert_then_update, start_aggregation, write_batches
from benchmarks.s3server import MotoServer
from state_store.format.seeding import SEED_FILE, apply_seed, staged_path
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot, query_dir
from state_store.savepoint import restore, savepoint
from state_store.spark import configure

RESULTS_JSON = report.RESULTS_DIR / "savepoints.json"
INSERT_BATCHES, UPDATE_BATCHES, UPDATES_PER_BATCH = 4, 2, 20_000
RESTORES_PER_REPEAT = 3  # a restore takes milliseconds: more samples against the noise
STORAGES = ("local", "s3", "azure", "gcs")
STEPS = ("copy", "savepoint", "restore", "seeding")
BASELINE = {"local": "fsspec copy", "s3": "s3fs copy", "azure": "adlfs copy",
            "gcs": "gcsfs copy"}
SERVERS: dict[str, Callable[[], Any]] = {"s3": MotoServer, "azure": Azurite, "gcs": FakeGcs}


@dataclass
class Step:
    """One timed operation and what it left: files and bytes it wrote (logical bytes: a
    hard link counts its file's size)."""

    seconds: float
    cpu_s: float  # this process's CPU time during it (the rest: I/O, moto, waiting)
    files: int
    bytes: int
    parts: dict[str, float] = field(default_factory=dict)  # seconds of sub-steps, or of
    # an fsync of what it wrote, timed after it (FSYNC; local only)


@dataclass
class CaseResult:
    storage: str
    keys: int
    build_s: float = 0.0
    commit_ms: float | None = None  # the build's median commit per batch
    batches: int = 0
    state_rows: int | None = None
    stores: int = 0
    seeded_keys: int | None = None  # num_keys of the seeded versions, summed over stores
    checkpoint_files: int = 0  # what the copy copies (on S3: checkpoint + state prefix)
    checkpoint_bytes: int = 0
    loadavg: list[str] = field(default_factory=list)  # /proc/loadavg before and after
    steps: dict[str, list[Step]] = field(default_factory=lambda: {s: [] for s in STEPS})
    median_s: dict[str, float] = field(default_factory=dict)
    min_s: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None


# ---------------------------------------------------------------------- build (a child)


def write_input(input_dir: Path, keys: int, seed: int) -> None:
    write_batches(input_dir, insert_then_update(keys, INSERT_BATCHES, UPDATE_BATCHES,
                                                UPDATES_PER_BATCH, seed))


def child(spec: dict[str, Any]) -> int:
    """One SparkSession: the aggregation over the whole input, then the session stops."""
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("pyrocks-savepoints")
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "4g"))
    options: dict[str, Any] = {"localDir": spec["local_dir"]}
    if spec.get("root_url"):
        options |= {"rootUrl": spec["root_url"],
                    "rootOptions": json.dumps(spec["root_options"])}
    spark = configure(builder, **options).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        query = start_aggregation(spark, Path(spec["input"]), spec["checkpoint"])
        if not query.awaitTermination(spec["timeout_s"]):
            query.stop()
            raise TimeoutError(f"build not done after {spec['timeout_s']:.0f} s")
        batches = batch_metrics(query.recentProgress)
    finally:
        spark.stop()  # writes each store's final snapshot
    print(json.dumps({"batches": len(batches),
                      "state_rows": batches[-1].state_rows if batches else None,
                      "commit_ms": statistics.median(b.commit_ms for b in batches)
                      if batches else None}))
    return 0


def build(input_dir: Path, checkpoint: Path, root_url: str | None,
          root_options: dict[str, Any] | None, timeout_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pyrocks-savepoints-local-") as local:
        spec = {"input": str(input_dir), "checkpoint": str(checkpoint), "local_dir": local,
                "root_url": root_url, "root_options": root_options, "timeout_s": timeout_s}
        answer, why = run_module_child("benchmarks.savepoints", spec, timeout_s + 300)
    if answer is None:
        raise RuntimeError(f"build: {why}")
    return answer


# ---------------------------------------------------------------------------- helpers


def root_prefix(checkpoint: Path) -> str:
    """The directory a query on `checkpoint` gets under rootUrl: the first 8 bytes of the
    SHA-256 of Spark's state root location (see the shim's relativeStorePath)."""
    return hashlib.sha256(f"file:{checkpoint}/state".encode()).digest()[:8].hex()


def tree(fs: Any, path: str) -> tuple[int, int]:
    """Files and bytes under `path`."""
    found = fs.find(path, detail=True)
    return len(found), sum(int(info.get("size") or 0) for info in found.values())


def timed(run: Callable[[], None]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def fsync_tree(root: str | Path) -> float:
    """Seconds to fsync every file and directory under a local `root`: what making it
    durable costs beyond the page cache (kept as a part of a step, never in its time)."""
    started = time.perf_counter()
    for directory, _, names in os.walk(root):
        for name in [*names, "."]:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    return time.perf_counter() - started


FSYNC = "then fsync (not in the time)"


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


# ------------------------------------------------------------------------------ steps


@dataclass
class Case:
    """Where one size on one storage lives, and how to reach it."""

    storage: str
    work: Path
    checkpoint: Path
    server: Any = None  # an object store's server on loopback; None on local disk
    root_url: str | None = None  # the build's rootUrl (object stores only)
    built_prefix: str = ""  # the build's directory under rootUrl

    @property
    def options(self) -> dict[str, Any] | None:
        return None if self.server is None else dict(self.server.options)

    def target(self, name: str) -> str:
        return self.server.url(name) if self.server else str(self.work / name)

    def fs(self) -> Any:
        return self.server.filesystem() if self.server else fsspec.filesystem("file")

    def remove(self, url: str) -> None:
        if self.server and "://" in url:
            fs = self.server.filesystem()
            if fs.exists(url):
                fs.rm(url, recursive=True)
        else:
            shutil.rmtree(url, ignore_errors=True)


def copy_step(case: Case, dst: str) -> Step:
    if case.server is None:
        local = fsspec.filesystem("file")
        seconds, cpu = timed(lambda: local.copy(str(case.checkpoint), dst, recursive=True))
        files, size = tree(local, dst)
        return Step(seconds, cpu, files, size, {FSYNC: fsync_tree(dst)})
    remote = case.server.filesystem()
    assert case.root_url is not None
    put_s, put_cpu = timed(lambda: remote.put(str(case.checkpoint), f"{dst}/checkpoint",
                                              recursive=True))
    state_s, state_cpu = timed(lambda: remote.copy(f"{case.root_url}/{case.built_prefix}",
                                                   f"{dst}/state", recursive=True))
    files, size = tree(case.server.filesystem(), dst)
    return Step(put_s + state_s, put_cpu + state_cpu, files, size,
                {"put checkpoint": put_s, "copy state prefix": state_s})


def savepoint_step(case: Case, dst: str) -> Step:
    infos = []
    seconds, cpu = timed(lambda: infos.append(savepoint(
        str(case.checkpoint), dst, target_options=case.options, root_url=case.root_url,
        root_options=case.options)))
    files, size = tree(case.fs(), dst)
    info = infos[0]
    if (files, size) != (info.files + 1, info.bytes + _descriptor_size(case, dst)):
        print(f"  note: savepoint reports {info.files} files, {info.bytes:,} B; found {files} "
              f"files, {size:,} B under {dst}", flush=True)
    return Step(seconds, cpu, files, size, {} if case.server else {FSYNC: fsync_tree(dst)})


def _descriptor_size(case: Case, dst: str) -> int:
    return int(case.fs().info(f"{dst}/_savepoint.json")["size"])


def restore_step(case: Case, source: str, new_checkpoint: Path) -> tuple[Step, str]:
    infos = []
    seconds, cpu = timed(lambda: infos.append(restore(
        source, str(new_checkpoint), storage_options=case.options, target_options={},
        target_root_url=case.root_url, target_root_options=case.options)))
    files, size = tree(fsspec.filesystem("file"), str(new_checkpoint))
    return Step(seconds, cpu, files, size, {FSYNC: fsync_tree(new_checkpoint)}), \
        infos[0].query_id


def seeding_step(case: Case, new_checkpoint: Path, query_id: str) -> tuple[Step, int, int]:
    """`apply_seed` for every store of the restored checkpoint, as `Session.open` in
    state_store/runtime/worker.py does it on the store's first open; returns the step, the number
    of stores and their keys."""
    state = new_checkpoint / "state"
    locations = sorted(p.parent for p in state.glob(f"**/{SEED_FILE}"))
    options = case.options
    prefix = root_prefix(new_checkpoint)
    targets: list[StoreRoot] = []
    versions: list[int] = []

    def seed_all() -> None:
        for location_dir in locations:
            key = location_dir.relative_to(state).parts
            op, part, name = key[0], key[1], key[2] if len(key) > 2 else "default"
            location = open_storage(str(location_dir))
            base = (open_storage(f"{case.root_url}/{prefix}/{op}/{part}/{name}", options)
                    if case.root_url else location)
            storage = base.child(query_dir(query_id))
            storage.verify_publish()
            target = StoreRoot(storage, "/".join(key), base)
            staged = (open_storage(case.root_url, options).child(
                staged_path(query_id, f"{op}/{part}/{name}")) if case.root_url else None)
            applied = apply_seed(location, target, query_id, staged)
            if applied is None and not target.versions():
                raise RuntimeError(f"no seed applied at {location_dir}")
            targets.append(target)
            versions.append(target.versions()[-1])

    seconds, cpu = timed(seed_all)
    keys = sum(t.read_manifest(v).num_keys for t, v in zip(targets, versions, strict=True))
    if case.root_url:
        files, size = tree(case.fs(), f"{case.root_url}/{prefix}")
        return Step(seconds, cpu, files, size), len(locations), keys
    found = [tree(fsspec.filesystem("file"), str(t.storage.root)) for t in targets]
    synced = sum(fsync_tree(t.storage.root) for t in targets)
    return (Step(seconds, cpu, sum(f for f, _ in found), sum(b for _, b in found),
                 {FSYNC: synced}), len(locations), keys)


# ------------------------------------------------------------------------------ runs


def measure(storage: str, keys: int, work: Path, repeats: int,
            timeout_s: float) -> CaseResult:
    result = CaseResult(storage, keys)
    case_dir = work / f"{storage}-{keys}"
    case_dir.mkdir()
    server = SERVERS[storage]() if storage in SERVERS else None
    try:
        case = Case(storage, case_dir, case_dir / "checkpoint", server)
        if server is not None:
            case.root_url = server.url(f"state-{keys}")
        write_input(case_dir / "input", keys, seed=7)
        started = time.monotonic()
        built = build(case_dir / "input", case.checkpoint, case.root_url, case.options,
                      timeout_s)
        result.build_s = round(time.monotonic() - started, 1)
        result.commit_ms = built.get("commit_ms")
        result.batches, result.state_rows = built["batches"], built["state_rows"]
        if result.batches != INSERT_BATCHES + UPDATE_BATCHES:
            raise RuntimeError(f"build ran {result.batches} batches")
        result.checkpoint_files, result.checkpoint_bytes = tree(fsspec.filesystem("file"),
                                                                str(case.checkpoint))
        if server is not None and case.root_url is not None:
            fs = server.filesystem()
            prefixes = [p.rsplit("/", 1)[-1] for p in fs.ls(case.root_url)]
            if len(prefixes) != 1:
                raise RuntimeError(f"expected one checkpoint under {case.root_url}: {prefixes}")
            case.built_prefix = prefixes[0]
            if case.built_prefix != root_prefix(case.checkpoint):
                result.notes.append(f"rootUrl prefix {case.built_prefix} is not the computed "
                                    f"{root_prefix(case.checkpoint)}: restored stores were "
                                    "seeded where the restored query would not look")
            files, size = tree(fs, f"{case.root_url}/{case.built_prefix}")
            result.checkpoint_files += files
            result.checkpoint_bytes += size
        os.sync()  # the build's writes reach the disk before anything is timed
        result.loadavg.append(loadavg())
        for r in range(repeats):
            copy_dst, sp_dst = case.target(f"copy-{keys}-{r}"), case.target(f"sp-{keys}-{r}")
            result.steps["copy"].append(copy_step(case, copy_dst))
            case.remove(copy_dst)
            result.steps["savepoint"].append(savepoint_step(case, sp_dst))
            restored, query_ids = [], []
            for i in range(RESTORES_PER_REPEAT):
                restored.append(case_dir / f"restored-{r}-{i}")
                step, query_id = restore_step(case, sp_dst, restored[-1])
                result.steps["restore"].append(step)
                query_ids.append(query_id)
            step, result.stores, result.seeded_keys = seeding_step(case, restored[0],
                                                                   query_ids[0])
            result.steps["seeding"].append(step)
            print(f"  [{storage} {keys:,}] repeat {r}: " + ", ".join(
                f"{name} {steps[-1].seconds:.3f} s" for name, steps in result.steps.items()),
                flush=True)
            case.remove(sp_dst)
            for path in restored:
                case.remove(str(path))
            if case.root_url:
                case.remove(f"{case.root_url}/{root_prefix(restored[0])}")
        result.loadavg.append(loadavg())
        result.median_s = {name: round(statistics.median(s.seconds for s in steps), 4)
                           for name, steps in result.steps.items()}
        result.min_s = {name: round(min(s.seconds for s in steps), 4)
                        for name, steps in result.steps.items()}
        if result.seeded_keys != result.state_rows:
            result.notes.append(f"seeded versions hold {result.seeded_keys} keys; the build's "
                                f"last batch reported {result.state_rows} state rows")
    except Exception as exc:  # a failing case is a result, not a crash of the benchmark
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(case_dir, ignore_errors=True)
    return result


# ----------------------------------------------------------------------------- report


def _median_of(steps: Sequence[dict[str, Any]], what: str) -> float:
    return statistics.median(s[what] for s in steps)


def _ok(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in payload["results"] if r["error"] is None]


def targets(payload: dict[str, Any]) -> list[report.Target]:
    found: list[report.Target] = []
    runs = _ok(payload)
    for storage in STORAGES:
        cases = sorted((r for r in runs if r["storage"] == storage), key=lambda r: r["keys"])
        baseline = BASELINE[storage]
        for r in cases:
            med = r["median_s"]
            copy_ms = 1000 * med["copy"]
            rows = [("savepoint", 1000 * med["savepoint"], "savepoint"),
                    ("restore no-claim (writes no state)", 1000 * med["restore"], "restore"),
                    ("restore no-claim + first-open seeding",
                     1000 * (med["restore"] + med["seeding"]), "seeding")]
            for label, ours, step in rows:
                steps = r["steps"][step]
                found.append(report.Target(
                    benchmark="savepoints", name=f"{label}, {r['keys']:,} keys, {storage}",
                    unit="ms", ours=round(ours, 1), compared_to=baseline,
                    ratio=report.ratio(ours, copy_ms), goal=1.0,
                    baselines={baseline: round(copy_ms, 1)},
                    note=(f"{step} wrote {_median_of(steps, 'files'):.0f} files, "
                          f"{_median_of(steps, 'bytes') / 1e6:,.2f} MB; the copy "
                          f"{_median_of(r['steps']['copy'], 'files'):.0f} files, "
                          f"{_median_of(r['steps']['copy'], 'bytes') / 1e6:,.2f} MB")))
        if len(cases) >= 2:
            found.append(_growth_target(storage, cases[0], cases[-1]))
    return found


def _growth_target(storage: str, small: dict[str, Any],
                   large: dict[str, Any]) -> report.Target:
    """How the restore's time grows with the state: its growth from the smallest to the
    largest size over the growth of the checkpoint's bytes. O(bytes) would be about 1;
    O(files) stays far below. Millisecond steps are noisy, so this uses each size's
    fastest restore (the medians are in the note)."""

    def grew(step: str, what: str) -> float:
        return (_median_of(large["steps"][step], what)
                / max(_median_of(small["steps"][step], what), 1e-9))

    lm, sm = large["median_s"], small["median_s"]
    low = large["min_s"]["restore"] / max(small["min_s"]["restore"], 1e-9)
    state = grew("copy", "bytes")
    return report.Target(
        benchmark="savepoints",
        name=f"restore no-claim time growth / state bytes growth, {large['keys']:,} vs "
             f"{small['keys']:,} keys, {storage}",
        unit="ms", ours=round(1000 * large["min_s"]["restore"], 1),
        compared_to=f"restore at {small['keys']:,} keys, per state bytes x{state:.1f}",
        ratio=round(low / state, 2), goal=0.5,
        baselines={f"restore at {small['keys']:,}": round(1000 * small["min_s"]["restore"], 1)},
        note=(f"bytes: savepoint x{grew('savepoint', 'bytes'):.1f}, checkpoint "
              f"x{state:.1f}; time: {BASELINE[storage]} "
              f"x{lm['copy'] / sm['copy']:.1f}, savepoint x{lm['savepoint'] / sm['savepoint']:.1f}"
              f", seeding x{lm['seeding'] / sm['seeding']:.1f}; restore min x{low:.2f}, "
              f"median x{lm['restore'] / sm['restore']:.2f}"))


def render(results: Sequence[CaseResult]) -> str:
    lines = [f"{'storage':<8}{'keys':>11}{'build s':>9}  "
             + "".join(f"{name + ' s':>13}{'files':>7}{'MB':>9}" for name in STEPS)
             + f"{'sp/copy':>9}{'rst/copy':>9}{'r+s/copy':>9}"]
    for r in results:
        if r.error:
            lines.append(f"{r.storage:<8}{r.keys:>11,}  ERROR {r.error.splitlines()[0][:160]}")
            continue
        cells = ""
        for name in STEPS:
            steps = r.steps[name]
            cells += (f"{r.median_s[name]:>13.3f}"
                      f"{statistics.median(s.files for s in steps):>7.0f}"
                      f"{statistics.median(s.bytes for s in steps) / 1e6:>9.2f}")
        med = r.median_s
        ratios = [med["savepoint"], med["restore"], med["restore"] + med["seeding"]]
        lines.append(f"{r.storage:<8}{r.keys:>11,}{r.build_s:>9.1f}  {cells}"
                     + "".join(f"{x / med['copy']:>9.3f}" for x in ratios))
        lines.append("    min s: " + ", ".join(f"{k} {v:.3f}" for k, v in r.min_s.items()))
        lines.append(f"    build: median commit {r.commit_ms} ms per batch")
        lines += [f"    note: {n}" for n in r.notes]
        for name, steps in r.steps.items():
            keys = dict.fromkeys(k for s in steps for k in s.parts)
            if keys:
                lines.append(f"    {name}, median s: " + ", ".join(
                    f"{k} {statistics.median(s.parts[k] for s in steps if k in s.parts):.3f}"
                    for k in keys))
        lines.append(f"    loadavg before/after: {' | '.join(r.loadavg)}")
    return "\n".join(lines)


def write(args: argparse.Namespace, results: Sequence[CaseResult]) -> None:
    import pyspark

    payload = {"environment": {"pyspark": pyspark.__version__, "fsspec": fsspec.__version__,
                               "python": platform.python_version(), "cpus": os.cpu_count(),
                               "master": "local[2]", "shuffle_partitions": 8},
               "config": {"keys": args.keys, "storages": args.storages,
                          "repeats": args.repeats, "restores_per_repeat": RESTORES_PER_REPEAT,
                          "insert_batches": INSERT_BATCHES, "update_batches": UPDATE_BATCHES,
                          "updates_per_batch": UPDATES_PER_BATCH},
               "results": [asdict(r) for r in results]}
    RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_JSON.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {RESULTS_JSON}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.savepoints", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="1000000,5000000",
                        help="comma-separated state sizes (keys)")
    parser.add_argument("--storages", default=",".join(STORAGES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="100000,200000 keys, 2 repeats")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per build, seconds")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: one build, as JSON
    args = parser.parse_args(argv)
    if args.child:
        return child(json.loads(args.child))
    if args.quick:
        args.keys, args.repeats = "100000,200000", 2
    sizes = [int(k) for k in args.keys.split(",") if k]
    storages = [s for s in args.storages.split(",") if s]
    unknown = set(storages) - set(STORAGES)
    if unknown:
        parser.error(f"unknown storages: {sorted(unknown)}")
    results = []
    with tempfile.TemporaryDirectory(prefix="pyrocks-savepoints-") as tmp:
        for keys in sizes:
            for storage in storages:
                print(f"[savepoints] {storage}, {keys:,} keys ...", flush=True)
                results.append(measure(storage, keys, Path(tmp), args.repeats, args.timeout))
                if results[-1].error:
                    print(f"  ERROR {results[-1].error}", flush=True)
    print(render(results))
    print("\n" + report.render(targets({"results": [asdict(r) for r in results]})))
    write(args, results)
    return 0 if all(r.error is None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
