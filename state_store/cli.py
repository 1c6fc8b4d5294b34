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

    inspect = sub.add_parser("inspect", help="list the committed versions of a store root")
    inspect.add_argument("root", help="a store root: <checkpoint>/state/<op>/<partition>")

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
        return inspect_root(args.root)
    return 2


def options_table() -> str:
    rows = ["| key | default | accepted | meaning |", "|---|---|---|---|"]
    for spec in options.SPECS:
        default = spec.default or "(see meaning)"
        rows.append(f"| `{options.PREFIX}{spec.key}` | {default} | {spec.accepted} | {spec.doc} |")
    return "\n".join(rows)


def inspect_root(root: str) -> int:
    from .checkpoint import Checkpoint
    from .storage import Storage

    checkpoint = Checkpoint(Storage(root), root)
    versions = checkpoint.versions()
    if not versions:
        checkpoint.refuse_foreign_state()
        print(f"no committed versions under {root}", file=sys.stderr)
        return 1
    for version in versions:
        m = checkpoint.read_manifest(version)
        print(json.dumps({
            "version": version, "num_keys": m.num_keys,
            "snapshot": m.snapshot.version if m.snapshot else None,
            "changelogs": [c.version for c in m.changelogs],
            "bytes": sum(f.size for f in m.files()),
        }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
