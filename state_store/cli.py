"""The `state-store` console command: what a person does by hand.

Every subcommand behaves alike: exit code 0 when it did what was asked, 1 for a finding (a
corrupt or missing savepoint, no state where one was named, a failed cleanup, no query
answering a stop), 2 for bad usage (an unknown or bad option, bad JSON, a storage URL that
cannot hold state); never a traceback for bad input. With `--json` it prints exactly one
JSON document on stdout, errors included: `{"error": {"exit_code", "type", "message"}}`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

from . import options
from .errors import OptionError, StateStoreError, UnsupportedStorageError

OK, FINDING, USAGE = 0, 1, 2


class CliError(Exception):
    """A failure the command reports in one line (or one JSON document), with its code."""

    def __init__(self, message: str, exit_code: int, kind: str = "UsageError") -> None:
        super().__init__(message)
        self.exit_code, self.kind = exit_code, kind


@dataclass(frozen=True)
class Outcome:
    """What a subcommand found: the document `--json` prints, the text a person reads."""

    document: Any
    text: str
    exit_code: int = OK


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, its one-line help, its arguments and what it runs."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], Outcome]


class _Parser(argparse.ArgumentParser):
    """Bad usage raises instead of exiting, so it is reported like every other error."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message}\n{self.format_usage().strip()}", USAGE)


class _Help(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default, where it has one worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS, []) \
                and "%(default)" not in text and action.option_strings:
            text += " (default: %(default)s)"
        return text


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    def of(package: str) -> str:
        try:
            return installed(package)
        except PackageNotFoundError:
            return "not installed"

    return (f"state-store {of('pyrocks-state-store')} (pyspark {of('pyspark')}, "
            f"rocksdict {of('rocksdict')})")


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="state-store", description=__doc__, formatter_class=_Help)
    top.add_argument("--version", action="version", version=version())
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND",
                             parser_class=_Parser)
    for command in COMMANDS:
        each = sub.add_parser(command.name, help=command.help, description=command.help,
                              formatter_class=_Help)
        command.arguments(each)
        each.add_argument("--json", action="store_true",
                          help="print one JSON document (errors too), no progress bar")
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    as_json = "--json" in argv
    try:
        args = parser().parse_args(argv)
        outcome = BY_NAME[args.command].run(args)
    except CliError as e:
        return _report(e.exit_code, e.kind, str(e), as_json, argv)
    except Exception as e:  # noqa: BLE001 - classified below; a bug still shows its trace
        code = _exit_code_of(e)
        if code is None:
            raise
        return _report(code, type(e).__name__, str(e), as_json, argv)
    try:
        if as_json:
            print(json.dumps(outcome.document, default=str))
        elif outcome.text:
            print(outcome.text)  # a report is the answer, also when it found a problem
        sys.stdout.flush()
    except BrokenPipeError:  # `state-store inspect ... | head`: the reader had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return outcome.exit_code


def _exit_code_of(e: Exception) -> int | None:
    """USAGE for what the user gave wrong, FINDING for what was found; None for a bug."""
    if isinstance(e, (OptionError, UnsupportedStorageError)):
        return USAGE
    if isinstance(e, (StateStoreError, OSError)):
        return FINDING
    if isinstance(e, (ValueError, TypeError)):  # from a storage library given bad options
        return USAGE
    return None


def _report(code: int, kind: str, message: str, as_json: bool, argv: list[str]) -> int:
    if as_json:
        print(json.dumps({"error": {"exit_code": code, "type": kind, "message": message}}))
    else:
        name = next((a for a in argv if a in BY_NAME), "")
        print(f"state-store{' ' + name if name else ''}: {message}", file=sys.stderr)
    return code


# ---- argument types --------------------------------------------------------------------------

def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e}): {text!r}") from e
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}")
    return value


def _claim_mode(text: str) -> str:
    """Ours (`claim`, `no-claim`) or Flink's spelling (`CLAIM`, `NO_CLAIM`)."""
    from .format.seeding import MODES

    mode = text.strip().lower().replace("_", "-")
    if mode not in MODES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a claim mode; choose one of "
                                         f"{', '.join(MODES)} (or CLAIM, NO_CLAIM)")
    return mode


def _non_negative(kind: type[int] | type[float]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from e
        if not value >= 0:
            raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
        return value
    return parse


# ---- each subcommand's arguments ------------------------------------------------------------

def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batches", type=int, default=8, help="micro-batches to run")
    parser.add_argument("--rows-per-second", type=int, default=2000,
                        help="rows the rate source makes per second")
    parser.add_argument("--checkpoint", default="pyrocks-demo",
                        help="the query's checkpoint, kept afterwards; an existing one is "
                             "resumed")
    parser.add_argument("--master", default="local[2]", help="Spark master")


def _conf_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("options", nargs="*", metavar="KEY=VALUE",
                        help="options by short name (see `state-store options`), e.g. "
                             "snapshotInterval=20 resultStore=s3://bucket/results")
    parser.add_argument("--local", action="store_true",
                        help="also name this interpreter as the workers' Python (pythonExec): "
                             "for sessions on this machine only")


def _inspect_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", help="a checkpoint, a savepoint, a store root, or a rootUrl")
    parser.add_argument("--storage-options", type=_json_object, default={},
                        help="fsspec options as JSON, e.g. '{\"endpoint_url\": \"...\"}'")
    parser.add_argument("--retain", type=_non_negative(int),
                        help="versions GC retains (default: what the query recorded, its "
                             "spark.sql.streaming.minBatchesToRetain, else 100)")
    parser.add_argument("--orphan-margin", type=_non_negative(float),
                        help="seconds before an unreferenced file counts as an orphan "
                             "(default: the query's orphanMarginSeconds, else 3600)")
    parser.add_argument("--root-url", help="the rootUrl the checkpoint's query keeps its "
                                           "state under (for its stores and depends_on)")
    parser.add_argument("--root-options", type=_json_object, default={},
                        help="fsspec options for --root-url")


def _format_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=["native", "canonical"], default="native",
                        help="native: this provider's files (fast); canonical: every store's "
                             "rows as typed Parquet, of a checkpoint of any provider, readable "
                             "by any tool, restorable at any partition count (a Spark job)")


def _savepoint_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="the query's checkpoint (or a savepoint to relocate)")
    parser.add_argument("target", help="a new directory (local or an object store URL)")
    parser.add_argument("--batch", type=_non_negative(int),
                        help="the committed batch (default: the latest)")
    _format_argument(parser)
    _add_storage_arguments(parser)


def _stop_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="the checkpoint of the running query")
    parser.add_argument("-p", "--savepoint-path", "--savepointPath", dest="target",
                        required=True, help="a new directory for the savepoint")
    parser.add_argument("--drain", action="store_true",
                        help="process everything available before stopping")
    parser.add_argument("--timeout", type=_non_negative(float), default=300.0,
                        help="seconds to wait for the query to stop")
    _format_argument(parser)
    _add_storage_arguments(parser)


def _dispose_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("savepoint", help="the savepoint to delete")
    parser.add_argument("--storage-options", type=_json_object, default={},
                        help="fsspec options as JSON for the savepoint")


def _restore_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="a savepoint, or another query's checkpoint")
    parser.add_argument("new_checkpoint", help="a new directory for the restored query")
    parser.add_argument("--mode", "--claim-mode", "--claimMode", dest="mode", type=_claim_mode,
                        default="no-claim",
                        help="no-claim: never delete the source's files; claim: the new query "
                             "owns them and deletes them once subsumed (Flink's CLAIM, "
                             "NO_CLAIM accepted)")
    parser.add_argument("--batch", type=_non_negative(int),
                        help="the batch to resume after (default: the savepoint's, or the "
                             "latest)")
    parser.add_argument("--partitions", type=int,
                        help="canonical savepoints: the new partition count (rows re-routed "
                             "by Spark's hash partitioning; spark.sql.shuffle.partitions "
                             "becomes it)")
    parser.add_argument("--provider", choices=["pyrocks", "rocksdb"], default="pyrocks",
                        help="canonical savepoints: write this store or Spark's "
                             "RocksDBStateStoreProvider (the way back to Spark's own)")
    parser.add_argument("--target-root-url",
                        help="the rootUrl the restored query will keep its state under: a "
                             "no-claim restore copies each store there (server-side on S3)")
    parser.add_argument("--target-root-options", type=_json_object, default={},
                        help="fsspec options for --target-root-url")
    _add_storage_arguments(parser)


def _results_arguments(parser: argparse.ArgumentParser) -> None:
    attempts = options.BY_KEY["cleanupMaxAttempts"]
    parser.add_argument("url", help="the result store (local or an object store URL)")
    parser.add_argument("--storage-options", type=_json_object, default={},
                        help="fsspec options as JSON")
    parser.add_argument("--cleanup", action="store_true",
                        help="complete the cleanup of every dirty run, then list")
    parser.add_argument("--root-options", type=_json_object, default={},
                        help="fsspec options for the runs' rootUrl (with --cleanup)")
    parser.add_argument("--max-attempts", type=_non_negative(int),
                        default=int(attempts.default),
                        help="attempts of each cleanup step (with --cleanup; 0: no limit, as "
                             f"{options.PREFIX}{attempts.key})")


def _add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage-options", type=_json_object, default={},
                        help="fsspec options as JSON for the source (and the target, unless "
                             "--target-options is given)")
    parser.add_argument("--target-options", type=_json_object,
                        help="fsspec options as JSON for the target")
    parser.add_argument("--root-url", help="the rootUrl the source query kept its state under")
    parser.add_argument("--root-options", type=_json_object, default={},
                        help="fsspec options for --root-url")


# ---- what each subcommand runs --------------------------------------------------------------

def _savepoint_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"storage_options": args.storage_options, "target_options": args.target_options,
            "root_url": args.root_url, "root_options": args.root_options}


def _savepoint(args: argparse.Namespace) -> Outcome:
    from .savepoint import savepoint

    info = savepoint(args.checkpoint, args.target, args.batch, quiet=args.json,
                     format=args.format, **_savepoint_options(args))
    return Outcome(asdict(info), f"savepoint of batch {info.batch} of query "
                                 f"{info.source_query_id} written to {info.path}: {info.stores} "
                                 f"stores, {info.files} files, {info.bytes:,} B")


def _stop(args: argparse.Namespace) -> Outcome:
    from .savepoint import stop_with_savepoint_remote

    info = stop_with_savepoint_remote(args.checkpoint, args.target, drain=args.drain,
                                      timeout_s=args.timeout, quiet=args.json,
                                      format=args.format, **_savepoint_options(args))
    return Outcome(asdict(info), f"query {info.source_query_id} stopped after batch "
                                 f"{info.batch}; its savepoint is {info.path} ({info.stores} "
                                 f"stores, {info.files} files, {info.bytes:,} B)")


def _dispose(args: argparse.Namespace) -> Outcome:
    from .savepoint import dispose_savepoint

    info = dispose_savepoint(args.savepoint, storage_options=args.storage_options)
    return Outcome(asdict(info), f"disposed of savepoint {info.path} (batch {info.batch}, "
                                 f"{info.files} files, {info.bytes:,} B)")


def _restore(args: argparse.Namespace) -> Outcome:
    from .savepoint import restore

    info = restore(args.source, args.new_checkpoint, args.mode, args.batch,
                   partitions=args.partitions, provider=args.provider,
                   target_root_url=args.target_root_url,
                   target_root_options=args.target_root_options, **_savepoint_options(args))
    return Outcome(asdict(info), f"restored {info.source} batch {info.batch} ({info.mode}) "
                                 f"into {info.checkpoint} as query {info.query_id}; start the "
                                 "query with checkpointLocation set to it")


# The query's own first delay (cleanupBackoffInitialSeconds); a person waits on this
# command, so its delays stop growing at a minute, not at the query's hour.
_CLEANUP_FIRST_DELAY_S = float(options.BY_KEY["cleanupBackoffInitialSeconds"].default)
_CLEANUP_LONGEST_DELAY_S = 60.0


def _results(args: argparse.Namespace) -> Outcome:
    from .results import Backoff, CleanupFailed, FileSystemResultStore
    from .results.cleanup import StateAccess
    from .results.recorder import resume

    store = FileSystemResultStore(args.url, args.storage_options)
    if not store.exists():
        raise CliError(f"no result store at {store.url}", FINDING, "NotFound")
    failed = ""
    if args.cleanup:
        access = StateAccess(None, args.root_options or None)
        try:
            resume(store, access, Backoff(_CLEANUP_FIRST_DELAY_S, _CLEANUP_LONGEST_DELAY_S,
                                          args.max_attempts))
        except CleanupFailed as e:
            failed = str(e)
    entries = store.entries()
    document = {"url": store.url, "runs": [{"clean": e.clean, **asdict(e.result)}
                                           for e in entries]}
    lines = []
    for e in entries:
        r = e.result
        error = f"  error: {r.error.splitlines()[0]}" if r.error else ""
        lines.append(f"{r.run_key}  {'clean' if e.clean else 'DIRTY':5}  {r.outcome:8}  last "
                     f"batch {r.last_batch_id}  query {r.query_id}  {r.checkpoint}{error}")
    lines.append(f"{len(entries)} runs, {sum(not e.clean for e in entries)} dirty, in "
                 f"{store.url}")
    if failed:
        document["error"] = {"exit_code": FINDING, "type": "CleanupFailed", "message": failed}
        lines.append(f"cleanup failed: {failed}")
    return Outcome(document, "\n".join(lines), FINDING if failed else OK)


def _conf(args: argparse.Namespace) -> Outcome:
    """Our settings as `spark-defaults.conf` lines, with any options given."""
    from .spark import cluster_conf, spark_conf

    malformed = [p for p in args.options if "=" not in p or not p.split("=", 1)[0].strip()]
    if malformed:
        raise CliError(f"expected KEY=VALUE, got {malformed[0]!r}", USAGE)
    given = dict(p.split("=", 1) for p in args.options)
    conf = (spark_conf if args.local else cluster_conf)(**given)
    width = max(map(len, conf))
    text = ["# pyrocks state store: add these to spark-defaults.conf (append to list values",
            "# you already have: spark.jars, spark.sql.extensions, spark.extraListeners,",
            "# spark.sql.streaming.streamingQueryListeners)."]
    text += [f"{key:<{width}}  {value}" for key, value in conf.items()]
    return Outcome(conf, "\n".join(text))


def _demo(args: argparse.Namespace) -> Outcome:
    from .tools.demo import run_demo

    summary = run_demo(args.batches, args.rows_per_second, args.checkpoint, args.master,
                       quiet=args.json)
    return Outcome(summary, summary["next_steps"])


def _build_shim(args: argparse.Namespace) -> Outcome:
    from .driver import bridge

    jar = str(bridge.jar_path())
    return Outcome({"jar": jar}, jar)


def _options(args: argparse.Namespace) -> Outcome:
    document = {
        "options": [{"key": options.PREFIX + s.key, "default": s.default,
                     "accepted": s.accepted, "doc": s.doc} for s in options.SPECS],
        "spark_settings": [{"key": s.key, "as": options.PREFIX + s.ours}
                           for s in options.SPARK_SETTINGS]
        + [{"key": k, "as": options.PREFIX + "memoryBoundMB"} for k in options.SPARK_MEMORY_KEYS],
    }
    return Outcome(document, options_table())


def options_table() -> str:
    rows = ["| key | default | accepted | meaning |", "|---|---|---|---|"]
    for spec in options.SPECS:
        default = spec.default or "(see meaning)"
        rows.append(f"| `{options.PREFIX}{spec.key}` | {default} | {spec.accepted} | {spec.doc} |")
    rows += ["", "Spark's RocksDB provider's settings honoured (ours, when set, win):", "",
             "| Spark's setting | read as |", "|---|---|"]
    rows += [f"| `{s.key}` | `{s.ours}` |" for s in options.SPARK_SETTINGS]
    rows.append(f"| `{options.SPARK_MEMORY_KEYS[0]}`, `{options.SPARK_MEMORY_KEYS[1]}` | "
                "`memoryBoundMB` (true: maxMemoryUsageMB, default 500; false: 0) |")
    return "\n".join(rows)


def _inspect(args: argparse.Namespace) -> Outcome:
    from .format.storage import open_storage
    from .format.store_root import StoreRoot
    from .savepoint.verify import format_savepoint_report, is_savepoint, verify_savepoint
    from .tools.inspect import describe_location, format_location

    state_root = open_storage(args.root_url, args.root_options) if args.root_url else None
    storage = open_storage(args.root, args.storage_options)
    if is_savepoint(storage):
        checked = verify_savepoint(storage, quiet=args.json)
        return Outcome(checked.to_dict(), format_savepoint_report(checked),
                       OK if checked.verified else FINDING)
    if not storage.fs.exists(storage.root):
        raise CliError(f"nothing at {args.root}", FINDING, "NotFound")
    report = describe_location(storage, args.retain, args.orphan_margin, state_root)
    if not report.stores and not report.depends_on and report.restored_from is None:
        StoreRoot(storage, args.root).refuse_foreign_state()
        raise CliError(f"no state of this provider under {args.root}", FINDING, "NoState")
    return Outcome(report.to_dict(), format_location(report))


COMMANDS: tuple[Command, ...] = (
    Command("demo", "run a small streaming aggregation on this provider, keeping its "
            "checkpoint", _demo_arguments, _demo),
    Command("build-shim", "build (or find cached) the Scala shim jar; print its path",
            _no_arguments, _build_shim),
    Command("options", "print every configuration option as a Markdown table", _no_arguments,
            _options),
    Command("conf", "print the spark-defaults.conf lines for this provider", _conf_arguments,
            _conf),
    Command("inspect", "versions, snapshots, files, sharing and a GC dry run of stored state; "
            "verifies a savepoint", _inspect_arguments, _inspect),
    Command("savepoint", "write a savepoint of a query's committed batch",
            _savepoint_arguments, _savepoint),
    Command("restore", "make a new checkpoint that resumes a savepoint or another checkpoint",
            _restore_arguments, _restore),
    Command("stop", "stop a running query at a batch boundary and write its savepoint "
            "(Flink's stop --savepointPath)", _stop_arguments, _stop),
    Command("dispose", "delete a savepoint no query owns or needs (Flink's savepoint "
            "--dispose)", _dispose_arguments, _dispose),
    Command("results", "list the runs in a query result store; --cleanup resumes dirty ones",
            _results_arguments, _results),
)
BY_NAME = {command.name: command for command in COMMANDS}


if __name__ == "__main__":
    sys.exit(main())
