"""The stdout table and the targets (docs/performance.md, "Targets"), judged from the figures
(pure)."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

START_TARGET_S = 1.0  # `dcgm-migrate --help`: the interpreter, every import, the help
RSS_TARGET_MB = 200.0
APPLY_TARGET_RATIO = 1.05
APPLY_TARGET_NODES = 1000
STATUS_TARGET_RATIO = 1.0
# Fleets: below them both pay a fixed start, which the start-up target holds instead (the
# 10-node ratio is retired: docs/performance.md, "Targets").
STATUS_TARGET_NODES = (1000, 5000)
# MB an apply reads / MB of one full read (docs/performance.md, "API load per apply")
FULL_READS_TARGET = 1.5


def _s(summary: Obj | None, unit: str = "s", digits: int = 2) -> str:
    if not summary or summary.get("median") is None:
        return "-"
    med, lo, hi = summary["median"], summary["min"], summary["max"]
    return f"{med:.{digits}f}{unit} [{lo:.{digits}f}-{hi:.{digits}f}]"


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f}"


def command_rows(name: str, c: Obj) -> list[str]:
    t = c.get("traffic") or {}
    return [f"  {name:<16} {_s(c['wall_s']):<24} {t.get('requests', '-'):>5} "
            f"{t.get('first_pages', '-'):>6} {_mb(t.get('bytes_sent', 0)):>8} "
            f"{_s(c['peak_rss_mb'], '', 0):<16} {_s(c.get('sim_cpu_s'), 's', 2)}"]


HEADER = (f"  {'command':<16} {'wall median [min-max]':<24} {'reqs':>5} {'first':>6} "
          f"{'MB sent':>8} {'peak RSS MB':<16} sim CPU")


def table(results: Obj) -> str:
    lines: list[str] = []
    cli = results.get("cli_start")
    if cli:
        lines.append(f"CLI start (`dcgm-migrate --help`): {_s(cli['wall_s'], 's', 3)}, "
                     f"peak RSS {_s(cli['peak_rss_mb'], ' MB', 0)}")
    imported = results.get("imports")
    if imported:
        lines.append(f"`python -c 'import migrator.commands'`: {_s(imported['wall_s'], 's', 3)}")
    for r in results.get("reads", []):
        lines.append("")
        lines.append(f"== {r['nodes']} nodes, {r['stack']} ({r['runs']} runs; sim ready in "
                     f"{r['sim_ready_s']:.1f}s; one full read {r.get('full_read_mb', 0):.1f} MB)")
        lines.append(HEADER)
        for name, c in r["commands"].items():
            label = "kubectl get" if name == "kubectl" else name
            lines.extend(command_rows(label, c))
        ratios = r.get("ratios") or {}
        if ratios:
            lines.append(f"  ratio status/kubectl {ratios['status_vs_kubectl']}, "
                         f"plan/kubectl {ratios['plan_vs_kubectl']}")
    for a in results.get("apply", []):
        st = a["settings"]
        lines.append("")
        lines.append(f"== apply --phase 3 at {a['nodes']} nodes, {a['stack']} ({a['runs']} runs; "
                     f"pod start {st['pod_start_seconds']:g}s + termination "
                     f"{st['termination_seconds']:g}s simulated, time scale {st['time_scale']:g})")
        lines.append(HEADER)
        lines.extend(command_rows("apply", a))
        waves = ", ".join(f"{p['daemonset']} {p['waves']} waves of {p['max_unavailable']}"
                          for p in a["floor_parts"])
        if a.get("reads_per_apply"):
            lines.append(f"  API bytes: {_s(a['reads_per_apply'], '', 2)} full reads per apply "
                         f"(MB sent / {a['full_read_mb']:.1f} MB of one full read; target "
                         f"<= {FULL_READS_TARGET:g})")
        if a.get("switch_reads_per_apply"):
            lines.append(f"  API bytes of phase 3 alone (phases 1-2 done, no pod rolls): "
                         f"{_s(a['switch_reads_per_apply'], '', 2)} full reads per apply")
        lines.append(f"  ideal floor {a['floor_s']:.2f}s ({waves}); ratio to it "
                     f"{_s(a['ratio_to_floor'], '', 3)}; overhead {a['overhead_s']:.2f}s")
        alone = a.get("sim_alone")
        if alone:
            lines.append(f"  the sim alone (fresh sim, no tool) rolls {alone['daemonset']} in "
                         f"{alone['wall_s']:.2f}s against their ideal floor "
                         f"{alone['floor_s']:.2f}s (ratio {alone['ratio']}): the rollout floor; "
                         f"apply / rollout floor {alone['apply_ratio']}")
    targets = results.get("targets") or []
    if targets:
        lines.append("")
        lines.append("Targets (docs/performance.md, 'Targets'):")
        for t in targets:
            mark = {True: "met", False: "NOT met", None: "n/a"}[t["met"]]
            lines.append(f"  [{mark}] {t['target']}: {t['figure']}")
    return "\n".join(lines)


def _largest(items: list[Obj]) -> Obj | None:
    return max(items, key=lambda r: r["nodes"]) if items else None


def targets(results: Obj) -> list[Obj]:
    """Each target (docs/performance.md, "Targets") with the figure that decides it (None: not
    measured)."""
    out: list[Obj] = []
    reads = results.get("reads", [])
    for cmd in ("plan", "status"):
        per_stack: dict[str, dict[int, int]] = {}
        for r in reads:
            t = r["commands"][cmd].get("traffic") or {}
            per_stack.setdefault(r["stack"], {})[r["nodes"]] = int(t.get("first_pages", -1))
        met = (all(len(set(v.values())) == 1 for v in per_stack.values())
               if per_stack and any(len(v) > 1 for v in per_stack.values()) else None)
        figure = "; ".join(f"{s}: " + ", ".join(f"{n} nodes {c}" for n, c in sorted(v.items()))
                           for s, v in per_stack.items())
        out.append({"target": f"`{cmd}` requests (first pages) independent of node count",
                    "met": met, "figure": figure or "not measured"})
    cli = results.get("cli_start")
    if cli:
        med = cli["wall_s"]["median"]
        out.append({"target": f"CLI start (--help) under {START_TARGET_S:g}s",
                    "met": med < START_TARGET_S,
                    "figure": f"{med:.3f}s median"})
    for nodes in STATUS_TARGET_NODES:
        for r in reads:
            if r["nodes"] == nodes and r.get("ratios"):
                ratio = r["ratios"]["status_vs_kubectl"]
                out.append({"target": f"status/kubectl <= {STATUS_TARGET_RATIO:g} at {nodes} "
                                      f"nodes ({r['stack']})",
                            "met": ratio is not None and ratio <= STATUS_TARGET_RATIO,
                            "figure": f"ratio {ratio} (status "
                                      f"{r['commands']['status']['wall_s']['median']}s, kubectl "
                                      f"{r['commands']['kubectl']['wall_s']['median']}s)"})
    applies = results.get("apply", [])
    at = [a for a in applies if a["nodes"] == APPLY_TARGET_NODES]
    pct = round((APPLY_TARGET_RATIO - 1) * 100)
    for a in at:
        ratio = a["ratio_to_floor"]["median"]
        alone = a.get("sim_alone")
        if alone:
            # The rollout floor: the time the simulated rollouts alone need (measured here).
            out.append({"target": f"apply --phase 3 at {APPLY_TARGET_NODES} nodes within {pct}% "
                                  f"of the rollout floor: the sim-alone rollouts ({a['stack']})",
                        "met": (alone["apply_ratio"] is not None
                                and alone["apply_ratio"] <= APPLY_TARGET_RATIO),
                        "figure": f"ratio {alone['apply_ratio']} ({a['wall_s']['median']}s vs "
                                  f"{alone['all_daemonsets_s']}s)"})
        out.append({"target": f"apply --phase 3 at {APPLY_TARGET_NODES} nodes within {pct}% "
                              f"of the ideal floor: no control-plane latency ({a['stack']})",
                    "met": ratio is not None and ratio <= APPLY_TARGET_RATIO,
                    "figure": f"ratio {ratio} ({a['wall_s']['median']}s vs {a['floor_s']}s)"})
    if not at:
        out.append({"target": f"apply --phase 3 at {APPLY_TARGET_NODES} nodes within 5%",
                    "met": None, "figure": "not measured"})
    per_apply = [(a["nodes"], a["stack"], a["reads_per_apply"]["max"]) for a in applies
                 if (a.get("reads_per_apply") or {}).get("max") is not None]
    out.append({"target": f"apply --phase 3 reads <= {FULL_READS_TARGET:g} full reads at every "
                          "size",
                "met": all(x <= FULL_READS_TARGET for _, _, x in per_apply) if per_apply
                else None,
                "figure": ", ".join(f"{n} nodes {s} {x}" for n, s, x in per_apply)
                or "not measured"})
    alone = [(a["nodes"], a["stack"], a["switch_reads_per_apply"]["max"]) for a in applies
             if (a.get("switch_reads_per_apply") or {}).get("max") is not None]
    if alone:
        out.append({"target": f"apply --phase 3 with phases 1-2 done reads <= "
                              f"{FULL_READS_TARGET:g} full reads at every size",
                    "met": all(x <= FULL_READS_TARGET for _, _, x in alone),
                    "figure": ", ".join(f"{n} nodes {s} {x}" for n, s, x in alone)})
    rss: list[tuple[float, str]] = []
    big_nodes = max([r["nodes"] for r in reads + applies], default=0)
    for r in reads:
        if r["nodes"] == big_nodes:
            rss += [(c["peak_rss_mb"]["max"], f"{n} {r['stack']}")
                    for n, c in r["commands"].items() if n != "kubectl"]
    for a in applies:
        if a["nodes"] == big_nodes:
            rss.append((a["peak_rss_mb"]["max"], f"apply {a['stack']}"))
    if rss:
        worst = max(rss)
        out.append({"target": f"peak RSS under {RSS_TARGET_MB:g} MB at {big_nodes} nodes",
                    "met": worst[0] < RSS_TARGET_MB,
                    "figure": f"largest {worst[0]:.0f} MB ({worst[1]})"})
    big_apply = _largest(applies)
    if big_apply and big_apply.get("sim_alone"):
        alone = big_apply["sim_alone"]
        wall = big_apply["wall_s"]["median"]
        sim_cpu = (big_apply.get("sim_cpu_s") or {}).get("median") or 0.0
        out.append({"target": f"the sim not the bottleneck at {big_apply['nodes']} nodes: its "
                              f"rollouts within {pct}% of the ideal floor",
                    "met": alone["ratio"] is not None and alone["ratio"] <= APPLY_TARGET_RATIO,
                    "figure": f"sim alone rolls at {alone['ratio']}x the ideal floor; sim CPU "
                              f"{sim_cpu:.0f}s over a {wall:.0f}s apply"})
    return out
