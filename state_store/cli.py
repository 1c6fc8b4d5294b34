"""The `state-store` console command: what a person does by hand."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass

from . import options
from .driver import bridge
from .format.storage import open_storage


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, its one-line help, its arguments and what it runs."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="state-store", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.arguments(sub.add_parser(command.name, help=command.help))
    args = parser.parse_args(argv)
    return BY_NAME[args.command].run(args)


# ---- each subcommand's arguments -----------------------------------------------------------

def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--rows-per-second", type=int, default=2000)
    parser.add_argument("--checkpoint", help="checkpoint directory (default: a temporary one)")
    parser.add_argument("--master", default="local[2]")


def _conf_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("options", nargs="*", metavar="KEY=VALUE",
                        help="options by short name (see `state-store options`), e.g. "
                             "snapshotInterval=20 resultStore=s3://bucket/results")
    parser.add_argument("--local", action="store_true",
                        help="also name this interpreter as the workers' Python (pythonExec): "
                             "for sessions on this machine only")


def _inspect_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", help="a checkpoint, a store root, or a rootUrl (local or s3://)")
    parser.add_argument("--storage-options", default="{}",
                        help="fsspec options as JSON, e.g. '{\"endpoint_url\": \"...\"}'")
    parser.add_argument("--retain", type=int, default=100,
                        help="versions GC would retain (spark.sql.streaming.minBatchesToRetain)")
    parser.add_argument("--orphan-margin", type=float, default=3600.0,
                        help="seconds before an unreferenced file counts as an orphan")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--root-url", help="the rootUrl the checkpoint's query keeps its "
                                           "state under (for its stores and depends_on)")
    parser.add_argument("--root-options", default="{}", help="fsspec options for --root-url")


def _savepoint_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="the query's checkpoint (or a savepoint to relocate)")
    parser.add_argument("target", help="a new directory (local or s3://) for the savepoint")
    parser.add_argument("--batch", type=int, help="the committed batch (default: the latest)")
    parser.add_argument("--format", choices=["native", "canonical"], default="native",
                        help="native: this provider's files (fast); canonical: every store's "
                             "rows as typed Parquet, of a checkpoint of any provider, readable "
                             "by any tool, restorable at any partition count (a Spark job)")
    _add_storage_arguments(parser)


def _restore_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="a savepoint, or another query's checkpoint")
    parser.add_argument("new_checkpoint", help="a new directory for the restored query")
    parser.add_argument("--mode", choices=["no-claim", "claim"], default="no-claim",
                        help="no-claim: never delete the source's files (default); claim: "
                             "the new query owns them and deletes them once subsumed")
    parser.add_argument("--batch", type=int, help="the batch to resume after "
                                                  "(default: the savepoint's, or the latest)")
    parser.add_argument("--partitions", type=int,
                        help="canonical savepoints: the new partition count (rows re-routed "
                             "by Spark's hash partitioning; spark.sql.shuffle.partitions "
                             "becomes it)")
    parser.add_argument("--provider", choices=["pyrocks", "rocksdb"], default="pyrocks",
                        help="canonical savepoints: write this store (default) or Spark's "
                             "RocksDBStateStoreProvider (the way back to Spark's own)")
    parser.add_argument("--target-root-url",
                        help="the rootUrl the restored query will keep its state under: a "
                             "no-claim restore copies each store there (server-side on S3)")
    parser.add_argument("--target-root-options", default="{}",
                        help="fsspec options for --target-root-url")
    _add_storage_arguments(parser)


def _results_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", help="the result store (local or s3://)")
    parser.add_argument("--storage-options", default="{}", help="fsspec options as JSON")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--cleanup", action="store_true",
                        help="complete the cleanup of every dirty run, then list")
    parser.add_argument("--root-options", default="{}",
                        help="fsspec options for the runs' rootUrl (with --cleanup)")
    parser.add_argument("--max-attempts", type=int, default=5,
                        help="attempts of each cleanup step (with --cleanup; 0: no limit)")


def _add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage-options", default="{}",
                        help="fsspec options as JSON for the source (and the target, unless "
                             "--target-options is given)")
    parser.add_argument("--target-options", help="fsspec options as JSON for the target")
    parser.add_argument("--root-url", help="the rootUrl the source query kept its state under")
    parser.add_argument("--root-options", default="{}", help="fsspec options for --root-url")
    parser.add_argument("--json", action="store_true", help="print the result as JSON, no bar")


def _savepoint_or_restore(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from .errors import StateStoreError
    from .savepoint import RestoreInfo, SavepointInfo, restore, savepoint

    common = {
        "storage_options": json.loads(args.storage_options),
        "target_options": json.loads(args.target_options) if args.target_options else None,
        "root_url": args.root_url, "root_options": json.loads(args.root_options),
    }
    result: SavepointInfo | RestoreInfo
    try:
        if args.command == "savepoint":
            result = savepoint(args.checkpoint, args.target, args.batch, quiet=args.json,
                               format=args.format, **common)
            told = (f"savepoint of batch {result.batch} of query {result.source_query_id} "
                    f"written to {result.path}: {result.stores} stores, {result.files} files, "
                    f"{result.bytes:,} B")
        else:
            result = restore(args.source, args.new_checkpoint, args.mode, args.batch,
                             partitions=args.partitions, provider=args.provider,
                             target_root_url=args.target_root_url,
                             target_root_options=json.loads(args.target_root_options),
                             **common)
            told = (f"restored {result.source} batch {result.batch} ({result.mode}) into "
                    f"{result.checkpoint} as query {result.query_id}; start the query with "
                    "checkpointLocation set to it")
    except StateStoreError as e:
        print(f"state-store {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(result)) if args.json else told)
    return 0


def _results(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from .results import Backoff, CleanupFailed, FileSystemResultStore
    from .results.cleanup import StateAccess
    from .results.recorder import resume

    store = FileSystemResultStore(args.url, json.loads(args.storage_options))
    failed = ""
    if args.cleanup:
        access = StateAccess(None, json.loads(args.root_options) or None)
        try:
            resume(store, access, Backoff(1.0, 60.0, args.max_attempts))
        except CleanupFailed as e:
            failed = str(e)
    entries = store.entries()
    if args.json:
        print(json.dumps({"url": store.url, "runs": [
            {"clean": e.clean, **asdict(e.result)} for e in entries]}))
    else:
        for e in entries:
            r = e.result
            state = "clean" if e.clean else "DIRTY"
            print(f"{r.run_key}  {state:5}  {r.outcome:8}  last batch {r.last_batch_id}  "
                  f"query {r.query_id}  {r.checkpoint}" + (f"  error: {r.error.splitlines()[0]}"
                                                            if r.error else ""))
        print(f"{len(entries)} runs, {sum(not e.clean for e in entries)} dirty, in {store.url}")
    if failed:
        print(f"state-store results: cleanup failed: {failed}", file=sys.stderr)
        return 1
    return 0


def _conf(args: argparse.Namespace) -> int:
    """Prints `spark-defaults.conf` lines: our settings, with any options given."""
    pairs, local = args.options, args.local
    from .errors import OptionError
    from .spark import cluster_conf, spark_conf

    malformed = [p for p in pairs if "=" not in p or not p.split("=", 1)[0].strip()]
    if malformed:
        print(f"state-store conf: expected KEY=VALUE, got {malformed[0]!r}", file=sys.stderr)
        return 2
    given = dict(p.split("=", 1) for p in pairs)
    try:
        conf = (spark_conf if local else cluster_conf)(**given)
    except OptionError as e:
        print(f"state-store conf: {e}", file=sys.stderr)
        return 2
    print("# pyrocks state store: add these to spark-defaults.conf (append to list values\n"
          "# you already have: spark.jars, spark.sql.extensions, spark.extraListeners).")
    width = max(map(len, conf))
    for key, value in conf.items():
        print(f"{key:<{width}}  {value}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .tools.demo import run_demo

    return run_demo(args.batches, args.rows_per_second, args.checkpoint, args.master)


def _build_shim(args: argparse.Namespace) -> int:
    print(bridge.jar_path())
    return 0


def _options(args: argparse.Namespace) -> int:
    print(options_table())
    return 0


def options_table() -> str:
    rows = ["| key | default | accepted | meaning |", "|---|---|---|---|"]
    for spec in options.SPECS:
        default = spec.default or "(see meaning)"
        rows.append(f"| `{options.PREFIX}{spec.key}` | {default} | {spec.accepted} | {spec.doc} |")
    return "\n".join(rows)


def _inspect(args: argparse.Namespace) -> int:
    from .format.store_root import StoreRoot
    from .savepoint.verify import format_savepoint_report, is_savepoint, verify_savepoint
    from .tools.inspect import describe_location, format_location

    root, as_json = args.root, args.json
    state_root = (open_storage(args.root_url, json.loads(args.root_options))
                  if args.root_url else None)
    storage = open_storage(root, json.loads(args.storage_options))
    if is_savepoint(storage):
        checked = verify_savepoint(storage, quiet=as_json)
        print(json.dumps(checked.to_dict()) if as_json else format_savepoint_report(checked))
        return 0 if checked.verified else 1
    report = describe_location(storage, args.retain, args.orphan_margin, state_root)
    if not report.stores and not report.depends_on and report.restored_from is None:
        StoreRoot(storage, root).refuse_foreign_state()
        print(f"no state of this provider under {root}", file=sys.stderr)
        return 1
    print(json.dumps(report.to_dict()) if as_json else format_location(report))
    return 0


COMMANDS: tuple[Command, ...] = (
    Command("demo", "run a small streaming aggregation on this provider", _demo_arguments,
            _demo),
    Command("build-shim", "build (or find cached) the Scala shim jar; print its path",
            _no_arguments, _build_shim),
    Command("options", "print every configuration option as a Markdown table", _no_arguments,
            _options),
    Command("conf", "print the spark-defaults.conf lines for this provider", _conf_arguments,
            _conf),
    Command("inspect", "versions, snapshots, files, sharing and a GC dry run of stored state",
            _inspect_arguments, _inspect),
    Command("savepoint", "write a savepoint of a query's committed batch",
            _savepoint_arguments, _savepoint_or_restore),
    Command("restore", "make a new checkpoint that resumes a savepoint or another checkpoint",
            _restore_arguments, _savepoint_or_restore),
    Command("results", "list the runs in a query result store; --cleanup resumes dirty ones",
            _results_arguments, _results),
)
BY_NAME = {command.name: command for command in COMMANDS}


if __name__ == "__main__":
    sys.exit(main())
