"""Every benchmark, one after another, then one table of the issue's targets.

    python -m benchmarks              # full sizes (it prints each module's time as it ends)
    python -m benchmarks --quick      # smoke sizes
    python -m benchmarks --report     # only re-render the table from results/*.json

Each benchmark runs in its own process (its own SparkSession and JVM) and writes
`results/<name>.json`; this reads them back through each module's `targets()` and writes
`results/summary.json` and the chart `results/summary.png` (ratios, with the target lines).
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import time
from collections.abc import Sequence

from benchmarks import report

# name -> extra arguments of the full run; every one takes --quick
BENCHMARKS: dict[str, tuple[str, ...]] = {
    "macro": ("--workloads", "aggregation,dedup,join,sessions"),
    "commit_scaling": (),
    "micro": (),
    "restore": (),
    "memory": (),
    "savepoints": (),
    "query_end": (),
    "canonical": (),
    "compression": (),
    "tws": (),
    "scale": (),  # the longest: 100k to 20M keys, every workload and provider
}
SUMMARY_JSON = report.RESULTS_DIR / "summary.json"
SUMMARY_PNG = report.RESULTS_DIR / "summary.png"


def run_all(names: Sequence[str], quick: bool) -> dict[str, int]:
    codes = {}
    for name in names:
        args = [sys.executable, "-m", f"benchmarks.{name}", *BENCHMARKS[name]]
        if quick:
            args.append("--quick")
        print(f"\n=== {name}: {' '.join(args[1:])}", flush=True)
        started = time.monotonic()
        codes[name] = subprocess.run(args).returncode
        print(f"=== {name}: exit {codes[name]} after {time.monotonic() - started:.0f} s",
              flush=True)
    return codes


def gather(names: Sequence[str]) -> list[report.Target]:
    found: list[report.Target] = []
    for name in names:
        payload = report.load(name)
        if payload is not None:
            found.extend(importlib.import_module(f"benchmarks.{name}").targets(payload))
    return found


def chart(targets: Sequence[report.Target]) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a build machine
    import matplotlib.pyplot as plt

    shown = [t for t in targets if t.ratio is not None]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(shown) + 1.5))
    colors = ["tab:green" if t.met else "tab:red" for t in shown]
    ax.barh(range(len(shown)), [t.ratio for t in shown], color=colors)
    ax.set_yticks(range(len(shown)), [f"{t.name}\n(vs {t.compared_to}; {t.goal_text})"
                                      for t in shown], fontsize=7)
    for row, t in enumerate(shown):  # each row's goal, as a short black tick
        ax.plot([t.goal, t.goal], [row - 0.45, row + 0.45], color="black", linewidth=1.5)
    ax.invert_yaxis()
    ax.set_xlabel("ratio (ours / baseline; black tick = goal)")
    ax.set_title("pyrocks state store: issue-4 targets (green = met)")
    fig.tight_layout()
    fig.savefig(SUMMARY_PNG, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke sizes")
    parser.add_argument("--report", action="store_true", help="render existing results only")
    parser.add_argument("--only", default=",".join(BENCHMARKS),
                        help="comma-separated subset of: " + ",".join(BENCHMARKS))
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmarks: {sorted(unknown)}")
    codes = {} if args.report else run_all(names, args.quick)
    targets = gather(names)
    print("\n" + report.render(targets))
    report.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    SUMMARY_JSON.write_text(json.dumps({"exit_codes": codes,
                                        "targets": [t.as_dict() for t in targets]}, indent=1))
    chart(targets)
    print(f"\nwrote {SUMMARY_JSON} and {SUMMARY_PNG}")
    return 1 if any(codes.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
