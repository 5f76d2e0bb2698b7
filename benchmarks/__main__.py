"""`python3 -m benchmarks`: the fleet-scale benchmark (see benchmarks/__init__.py)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import report, suite

DEFAULT_OUT = Path(__file__).resolve().parent / "results.json"


def read_runs(nodes: int) -> int:
    return 5 if nodes <= 100 else 3


def apply_runs(nodes: int) -> int:
    return 3 if nodes <= 100 else 2 if nodes <= 1000 else 1


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _words(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m benchmarks", description=__doc__)
    p.add_argument("--sizes", type=_ints, default=[10, 100, 1000, 5000],
                   help="node counts (default 10,100,1000,5000)")
    p.add_argument("--runs", type=int, default=None,
                   help="runs per measurement (default: 5 up to 100 nodes, 3 above; apply "
                        "3 up to 100 nodes, 2 at 1000, 1 above)")
    p.add_argument("--stacks", type=_words, default=["gpucluster", "clusterpolicy"],
                   help="stacks for plan/status/kubectl (default gpucluster,clusterpolicy)")
    p.add_argument("--apply-stacks", type=_words, default=["gpucluster"],
                   help="stacks for apply --phase 3 (default gpucluster; '' to skip)")
    p.add_argument("--pod-start-seconds", type=float, default=30.0,
                   help="simulated pod start for apply (default 30)")
    p.add_argument("--termination-seconds", type=float, default=1.0,
                   help="simulated pod termination for apply (default 1)")
    p.add_argument("--time-scale", type=float, default=0.001,
                   help="real seconds per simulated second for apply (default 0.001)")
    p.add_argument("--no-kubectl", action="store_true", help="skip the kubectl reference")
    p.add_argument("--no-sim-alone", action="store_true",
                   help="skip measuring the rollout floor (the sim alone rolling every DaemonSet)")
    p.add_argument("--help-runs", type=int, default=10, help="runs of --help (default 10)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help=f"results file (default {DEFAULT_OUT})")
    return p.parse_args(argv)


def _meta() -> dict[str, Any]:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True,
                                  cwd=Path(__file__).parent, check=False).stdout.strip()
        except OSError:
            return ""

    try:
        kubectl = subprocess.run(["kubectl", "version", "--client", "-o", "json"],
                                 capture_output=True, text=True, check=False).stdout
        kubectl_version = json.loads(kubectl)["clientVersion"]["gitVersion"]
    except (OSError, ValueError, KeyError):
        kubectl_version = ""
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": git("rev-parse", "--short", "HEAD"), "python": platform.python_version(),
            "cpus": os.cpu_count(), "machine": platform.machine(), "kubectl": kubectl_version}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)

    def echo(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    began = time.perf_counter()
    results: dict[str, Any] = {"meta": _meta(), "settings": {
        "sizes": args.sizes, "runs": args.runs, "stacks": args.stacks,
        "apply_stacks": args.apply_stacks, "pod_start_seconds": args.pod_start_seconds,
        "termination_seconds": args.termination_seconds, "time_scale": args.time_scale}}
    echo("CLI start ...")
    results["cli_start"] = suite.cli_start(args.help_runs)
    results["imports"] = suite.imports(args.help_runs)
    results["reads"] = []
    results["apply"] = []
    apply_settings = suite.ApplySettings(args.pod_start_seconds, args.termination_seconds,
                                         args.time_scale, not args.no_sim_alone)
    for nodes in args.sizes:
        for stack in args.stacks:
            echo(f"{nodes} nodes, {stack}: plan / status / kubectl ...")
            results["reads"].append(suite.reads(
                nodes, stack, args.runs or read_runs(nodes), kubectl=not args.no_kubectl,
                echo=echo))
        for stack in args.apply_stacks:
            echo(f"{nodes} nodes, {stack}: apply --phase 3 ...")
            results["apply"].append(suite.apply_phase3(
                nodes, stack, args.runs or apply_runs(nodes), apply_settings, echo=echo))
    results["meta"]["duration_s"] = round(time.perf_counter() - began, 1)
    results["targets"] = report.targets(results)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(report.table(results))
    print(f"\n({results['meta']['duration_s']:.0f}s; figures in {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
