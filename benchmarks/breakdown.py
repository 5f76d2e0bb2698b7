"""`python3 -m benchmarks.breakdown`: where the bytes of one `apply --phase 3` go.

One fresh sim, one apply (or, with `--phase3-alone`, an apply and `rollback --phase 3` first,
then the measured `apply --phase 3`), and the server's request log grouped by verb, resource,
object name and selector, each group in full reads (MB sent / MB of one full read, as
`python3 -m benchmarks` reports the total). docs/performance.md "API load per apply" is
built from its output.
"""

from __future__ import annotations

import argparse
import urllib.parse
from collections import Counter
from typing import Any

from benchmarks.procs import CLI, run
from benchmarks.simproc import SimProcess, SimSettings
from benchmarks.suite import ApplySettings

Obj = dict[str, Any]
Group = tuple[str, str, str, str]  # verb, resource, name, selectors


def group_of(record: Obj) -> Group:
    """The request's verb, resource, object name and selectors (values shortened)."""
    selectors = []
    for part in str(record.get("query") or "").split("&"):
        key, _, value = part.partition("=")
        if key in ("labelSelector", "fieldSelector"):
            selectors.append(f"{key}={urllib.parse.unquote(value)[:48]}")
    return (str(record.get("verb")), str(record.get("resource")), str(record.get("name") or ""),
            " ".join(selectors))


def _apply(sim: SimProcess, *argv: str) -> None:
    run([*CLI, *argv, "--yes", "-o", "json", "--timeout", "12h",
         "--kubeconfig", sim.kubeconfig]).checked(" ".join(argv))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.breakdown",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--stack", default="gpucluster")
    parser.add_argument("--phase3-alone", action="store_true",
                        help="measure phase 3 on a migrated cluster whose phase 3 was rolled back")
    parser.add_argument("--top", type=int, default=25, help="groups to print")
    args = parser.parse_args()
    apply = ApplySettings()  # the benchmark's own apply settings
    settings = SimSettings(args.nodes, args.stack, time_scale=apply.time_scale,
                           pod_start_seconds=apply.pod_start_seconds,
                           termination_seconds=apply.termination_seconds)
    with SimProcess(settings) as sim:
        full = sim.full_read_bytes()
        if args.phase3_alone:
            _apply(sim, "apply", "--phase", "3")
            _apply(sim, "rollback", "--phase", "3")
        sim.clear_log()
        _apply(sim, "apply", "--phase", "3")
        sim.traffic()  # waits for every stream to close
        records = sim.call("GET", "/sim/v1/requests")
    sent: Counter[Group] = Counter()
    count: Counter[Group] = Counter()
    for r in records:
        group = group_of(r)
        sent[group] += int(r.get("bytes_sent") or 0)
        count[group] += 1
    total = sum(sent.values())
    print(f"{args.nodes} nodes, {args.stack}: one full read {full / 1e6:.3f} MB; the apply read "
          f"{total / 1e6:.3f} MB = {total / full:.2f} full reads")
    print(f"{'full reads':>10} {'requests':>8}  verb resource name selectors")
    for group, size in sent.most_common(args.top):
        print(f"{size / full:10.3f} {count[group]:8d}  {' '.join(g for g in group if g)}")


if __name__ == "__main__":
    main()
