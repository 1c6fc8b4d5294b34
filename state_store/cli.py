"""The `state-store` console command: what a person does by hand."""

from __future__ import annotations

import argparse
import json
import sys

from . import bridge, options


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="state-store", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run a small streaming aggregation on this provider")
    demo.add_argument("--batches", type=int, default=8)
    demo.add_argument("--rows-per-second", type=int, default=2000)
    demo.add_argument("--checkpoint", help="checkpoint directory (default: a temporary one)")
    demo.add_argument("--master", default="local[2]")

    sub.add_parser("build-shim", help="build (or find cached) the Scala shim jar; print its path")
    sub.add_parser("options", help="print every configuration option as a Markdown table")

    inspect = sub.add_parser(
        "inspect", help="versions, snapshots, files, sharing and a GC dry run of stored state")
    inspect.add_argument("root", help="a checkpoint, a store root, or a rootUrl (local or s3://)")
    inspect.add_argument("--storage-options", default="{}",
                         help="fsspec options as JSON, e.g. '{\"endpoint_url\": \"...\"}'")
    inspect.add_argument("--retain", type=int, default=100,
                         help="versions GC would retain (spark.sql.streaming.minBatchesToRetain)")
    inspect.add_argument("--orphan-margin", type=float, default=3600.0,
                         help="seconds before an unreferenced file counts as an orphan")
    inspect.add_argument("--json", action="store_true", help="print JSON lines")

    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(args.batches, args.rows_per_second, args.checkpoint, args.master)
    if args.command == "build-shim":
        print(bridge.jar_path())
        return 0
    if args.command == "options":
        print(options_table())
        return 0
    if args.command == "inspect":
        return inspect_root(args.root, json.loads(args.storage_options), args.retain,
                            args.orphan_margin, args.json)
    return 2


def options_table() -> str:
    rows = ["| key | default | accepted | meaning |", "|---|---|---|---|"]
    for spec in options.SPECS:
        default = spec.default or "(see meaning)"
        rows.append(f"| `{options.PREFIX}{spec.key}` | {default} | {spec.accepted} | {spec.doc} |")
    return "\n".join(rows)


def inspect_root(root: str, storage_options: dict, retain: int, orphan_margin: float,
                 as_json: bool) -> int:
    from .checkpoint import Checkpoint
    from .inspect import describe_root, format_report
    from .storage import open_storage

    storage = open_storage(root, storage_options)
    reports = describe_root(storage, retain, orphan_margin)
    if not reports:
        Checkpoint(storage, root).refuse_foreign_state()
        print(f"no state of this provider under {root}", file=sys.stderr)
        return 1
    for report in reports:
        print(json.dumps(report.to_dict()) if as_json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
