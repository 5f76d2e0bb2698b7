"""`python3 -m benchmarks.guard`: what `dcgm-migrate guard` costs in a cluster running both stacks.

One `mixed` sim (ClusterPolicy and GPUCluster CRs, nodes split half and half; so the operator
release that lets both stacks coexist, `future-coexistence`: the shipped one refuses) in this
process,
serving HTTP as `sim serve` does; the guard is the CLI (`python -m migrator guard`, as the
`dcgm-migrate` console script runs it) in a process of its own, so the sim's memory is not
counted, talking to the sim through a byte-counting TCP proxy in this process. Three figures:

1. peak RSS of the guard process: `/proc/<pid>/status` VmHWM (peak since exec) once it has
   shared both stable names to every GPUCluster node, after the steady window, after each
   takeover, and the last sample before it is stopped (the whole run's peak);
2. its reaction to an operator takeover, over `--takeovers` repetitions, in simulated seconds
   (`sim.clock`): the ClusterPolicy is deleted (garbage collection takes its Services, the
   guard creates the aliases again), then created again: its operator imitation replaces the
   aliases whole. Reaction = from the store event of that takeover write of a stable Service
   (its controller ownerReference becomes ClusterPolicy) to the store event after which the
   tool's EndpointSlices of that name list a ready endpoint on every GPUCluster node;
3. API bytes per hour of steady state: what the proxy carried both ways (requests, answers,
   watch streams) over `--steady-seconds` of real time with nothing changing, scaled to an hour,
   and how many of the guard's verdicts (a whole read of the namespace) fell in it. The window
   opens once the verdict the guard's own start is owed has been taken, and that verdict's
   bytes are measured too (the answers to its lists, from the sim's request log).

Phase 1 rolls every DaemonSet one node at a time (7,500 waves per DaemonSet at 15,000 nodes),
so the benchmark does not run `apply` on the big sim: it runs `apply --phase 3 --yes --settle
0s` on an 8-node `mixed` sim and writes the state ConfigMap that apply left there (phases 1-3
completed, both stable names shared) into the big one. The guard decides from the phase
statuses, so it acts as it would after a real apply; the big sim's DaemonSets lack the common
label phase 1 would have set. Measurements, never assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import guardprofile
from benchmarks.procs import CLI
from dcgm_sim.apilatency import DEFAULT_WRITE_SECONDS, WriteLatency
from dcgm_sim.cluster import SimCluster, write_kubeconfig
from dcgm_sim.controllers.operator import RESYNC_SECONDS
from dcgm_sim.controllers.releases import FUTURE_COEXISTENCE
from dcgm_sim.seed import seeded_cr
from dcgm_sim.store import Event
from migrator.engine.guard import GuardSettings
from migrator.model import kinds, objects

Obj = dict[str, Any]
NS = "gpu-operator"
STATE_CONFIGMAP = "dcgm-migrate-state"
# Stable name → the GPUCluster DaemonSet whose pods the guard adds to it.
STABLE = {"nvidia-dcgm": "nvidia-dcgm-dra", "nvidia-dcgm-exporter": "nvidia-dcgm-exporter-dra"}
TOOL = "dcgm-migrate"
MANAGED_BY = "app.kubernetes.io/managed-by"


def _controller_kind(obj: Obj | None) -> str:
    for ref in ((obj or {}).get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind") or "")
    return ""


@dataclass
class _Name:
    """What the EndpointSlices of one stable name cover: GPUCluster node → slices listing a
    ready endpoint of that name's GPUCluster pod there, for the tool's slices and for all."""

    pods: frozenset[str]
    nodes: frozenset[str]
    tool: Counter[str] = field(default_factory=Counter)
    every: Counter[str] = field(default_factory=Counter)
    # Nodes of `nodes` with no count in `tool` / `every`, kept as the counts change: the
    # tracker runs under the sim's store lock on every slice event, so checking coverage by
    # scanning 7,500 nodes each time would slow the very writes it times.
    tool_missing: int = -1
    every_missing: int = -1
    takeover_at: float | None = None
    takeover_wall: float = 0.0  # time.time() of the takeover, for the request log (--profile)
    reactions: list[float] = field(default_factory=list)
    real: list[float] = field(default_factory=list)  # the same reactions in real seconds
    takeover_cpu: float = 0.0  # the guard's CPU seconds at the takeover
    cpu: list[float] = field(default_factory=list)  # the guard's CPU seconds in each reaction
    windows: list[tuple[float, float]] = field(default_factory=list)  # (wall start, real)

    def __post_init__(self) -> None:
        self.tool_missing = self.every_missing = len(self.nodes)

    def add(self, node: str, sign: int, tool: bool) -> None:
        for counts, attr in ((self.every, "every_missing"),
                             *(((self.tool, "tool_missing"),) if tool else ())):
            before = counts[node]
            counts[node] = before + sign
            if node in self.nodes and (before > 0) != (before + sign > 0):
                setattr(self, attr, getattr(self, attr) + (1 if before > 0 else -1))

    def covered(self, tool: bool) -> bool:
        return (self.tool_missing if tool else self.every_missing) == 0


class Tracker:
    """A store subscriber (called under the store lock, stamped with the sim clock) that keeps
    the coverage of each stable name incrementally and times takeovers."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self.pid = 0  # the guard's, once it runs (its CPU time per reaction)
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        pods = sim.store.list(kinds.POD, NS)[0]
        self.names: dict[str, _Name] = {}
        for name, ds in STABLE.items():
            mine = [p for p in pods if (p["metadata"].get("ownerReferences") or [{}])[0]
                    .get("name") == ds]
            self.names[name] = _Name(frozenset(p["metadata"]["name"] for p in mine),
                                     frozenset(p["spec"].get("nodeName", "") for p in mine))
        self.owner = {n: _controller_kind(sim.store.find(kinds.SERVICE, NS, n)) for n in STABLE}
        self.tool_service = {n: False for n in STABLE}
        for sl in sim.store.list(kinds.ENDPOINTSLICE, NS)[0]:
            self._count(sl, +1)
        sim.store.subscribe(self.on_event)

    def close(self) -> None:
        self.sim.store.unsubscribe(self.on_event)

    def _count(self, sl: Obj | None, sign: int) -> None:
        if not sl:
            return
        labels = sl["metadata"].get("labels") or {}
        name = self.names.get(labels.get(objects.SERVICE_NAME_LABEL, ""))
        if name is None:
            return
        nodes = {ep.get("nodeName", "") for ep in sl.get("endpoints") or []
                 if (ep.get("conditions") or {}).get("ready") in (None, True)
                 and (ep.get("targetRef") or {}).get("name") in name.pods}
        tool = labels.get(objects.MANAGED_BY_LABEL) == TOOL
        for node in nodes:
            name.add(node, sign, tool)

    def on_event(self, event: Event) -> None:
        kind = event.resource.kind
        if kind == kinds.ENDPOINTSLICE.kind:
            if (event.object.get("metadata") or {}).get("namespace") != NS:
                return
            with self.lock:
                self._count(event.old if event.type == "MODIFIED" else None, -1)
                self._count(event.object, -1 if event.type == "DELETED" else +1)
                for name in self.names.values():
                    if name.takeover_at is not None and name.covered(tool=True):
                        name.reactions.append(self.sim.clock.now() - name.takeover_at)
                        name.real.append(time.time() - name.takeover_wall)
                        name.cpu.append(_cpu_seconds(self.pid) - name.takeover_cpu)
                        name.windows.append((name.takeover_wall, name.real[-1]))
                        name.takeover_at = None
                self.changed.notify_all()
        elif kind == kinds.SERVICE.kind:
            svc = event.object
            svc_name = svc["metadata"].get("name", "")
            if svc["metadata"].get("namespace") != NS or svc_name not in self.names:
                return
            with self.lock:
                now_kind = "" if event.type == "DELETED" else _controller_kind(svc)
                if now_kind == objects.OPERATOR_KIND != self.owner[svc_name]:
                    self.names[svc_name].takeover_at = self.sim.clock.now()
                    self.names[svc_name].takeover_wall = time.time()
                    self.names[svc_name].takeover_cpu = _cpu_seconds(self.pid)
                self.owner[svc_name] = now_kind
                self.tool_service[svc_name] = (event.type != "DELETED" and (
                    svc["metadata"].get("labels") or {}).get(MANAGED_BY) == TOOL)
                self.changed.notify_all()

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self.lock:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{what}: not within {timeout:.0f} s")
                self.changed.wait(min(left, 1.0))

    def shared(self) -> bool:
        """Both stable names list the GPUCluster pod of every GPUCluster node in tool slices."""
        return all(n.covered(tool=True) for n in self.names.values())

    def aliases_again(self) -> bool:
        """The tool's aliases hold both names and reach every GPUCluster node."""
        return all(self.tool_service[s] and n.covered(tool=False) for s, n in self.names.items())

    def reacted(self, count: int) -> bool:
        return all(len(n.reactions) >= count for n in self.names.values())


class CountingProxy:
    """127.0.0.1 TCP proxy to the sim that counts the bytes carried each way, for everything
    the guard sends and receives (watch streams included, as they flow)."""

    def __init__(self, target_url: str) -> None:
        host_port = target_url.split("://", 1)[1].rstrip("/")
        host, port = host_port.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.lock = threading.Lock()
        self.up = 0  # client → server
        self.down = 0  # server → client
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def totals(self) -> tuple[int, int]:
        with self.lock:
            return self.up, self.down

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            with self.lock:
                self.connections += 1
            for src, dst, up in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(src, dst, up), daemon=True,
                                 name="proxy-pump").start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while data := src.recv(256 * 1024):
                dst.sendall(data)
                with self.lock:
                    if up:
                        self.up += len(data)
                    else:
                        self.down += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


def _verdict_reads(records: list[Any]) -> list[Any]:
    """The first page of each of the guard's whole reads (its verdict): in steady state nothing
    else of it lists pods, and a whole read lists them first by the components' app labels
    (`stacks.pod_selectors`: `app in (...)`)."""
    out = []
    for r in records:
        query = urllib.parse.parse_qs(r.query)
        if (r.verb == "list" and r.resource == "pods" and "continue" not in query
                and query.get("labelSelector", [""])[0].startswith("app in")):
            out.append(r)
    return out


def _read_bytes(records: list[Any]) -> int:
    """The answers to a whole read: every list from its first page on, until it ended."""
    first = _verdict_reads(records)
    if not first:
        return 0
    return sum(r.bytes_sent for r in records if r.verb == "list" and r.seq >= first[0].seq)


def _quiet_for(sim: SimCluster, seconds: float, after: int) -> bool:
    """No list request since `after` arrived in the last `seconds` (a whole read is over)."""
    lists = [r for r in sim.server.log.since(after) if r.verb == "list"]
    return not lists or time.time() - lists[-1].time >= seconds


def _poll(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """For predicates that read the store: never under the tracker's lock (the store calls
    the tracker under its own)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.05)


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of the process so far, every thread (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _vm_hwm_mb(pid: int) -> float:
    """The process's peak resident set since its exec (0 once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


class _HighWater:
    """VmHWM of a child, sampled every 0.2 s until it exits. Not `wait4`'s ru_maxrss: that
    counts the child from fork, when it was still a copy of this process and its seeded sim
    (about 450 MB at 15,000 nodes), and exec does not reset it; VmHWM starts at exec."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._last = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="vmhwm")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._last = max(self._last, _vm_hwm_mb(self.pid))

    def last(self) -> float:
        self._last = max(self._last, _vm_hwm_mb(self.pid))
        return self._last

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


def _note(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def applied_state() -> Obj:
    """The state ConfigMap `apply --phase 3 --yes --settle 0s` leaves on an 8-node `mixed`
    sim: phases 1-3 completed, both stable names shared."""
    with SimCluster(nodes=8, stack="mixed", operator_release=FUTURE_COEXISTENCE,
                    time_scale=0.005) as small:
        done = subprocess.run([*CLI, "apply", "--phase", "3", "--yes", "--settle", "0s",
                               "--kubeconfig", small.kubeconfig], capture_output=True,
                              text=True, timeout=600, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError(f"apply on the 8-node sim exited {done.returncode}: "
                               f"{done.stderr[-800:]}")
        cm = small.store.get(kinds.CONFIGMAP, NS, STATE_CONFIGMAP)
    meta = cm["metadata"]
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": dict(cm.get("data") or {}),
            "metadata": {"name": meta["name"], "namespace": NS,
                         "labels": dict(meta.get("labels") or {}),
                         "annotations": dict(meta.get("annotations") or {})}}


@dataclass
class Figures:
    nodes: int
    gpucluster_nodes: int
    seed_s: float = 0.0
    share_real_s: float = 0.0
    share_sim_s: float = 0.0
    rss_shared_mb: float = 0.0
    rss_steady_mb: float = 0.0
    rss_peak_mb: float = 0.0
    steady_real_s: float = 0.0
    steady_bytes: int = 0
    steady_bytes_down: int = 0
    steady_requests: int = 0
    bytes_per_hour: float = 0.0
    requests_per_hour: float = 0.0
    verdicts_in_window: int = 0  # the guard's whole reads in the steady window
    owed_wait_s: float = 0.0  # from the share until the verdict the start is owed was taken
    verdict_bytes: int = 0  # the answers to that verdict's lists
    reactions_s: list[float] = field(default_factory=list)
    rss_after_takeover_mb: list[float] = field(default_factory=list)  # VmHWM after each
    reaction_median_s: float | None = None
    reaction_max_s: float | None = None
    # The same reactions in real seconds: with the sim's own write handling (and its
    # controllers' share of the interpreter meanwhile), which `api_write_ms` leaves out.
    reactions_real_s: list[float] = field(default_factory=list)
    reaction_real_median_s: float | None = None
    reaction_real_max_s: float | None = None
    api_write_ms: float = 0.0  # the modelled write latency (0: the sim's own time)
    # The guard's CPU seconds (every thread) within each reaction: what no API server speed
    # takes away (its decision, its requests, its watches' decoding).
    reaction_cpu_s: list[float] = field(default_factory=list)
    reaction_cpu_median_s: float | None = None
    takeovers: int = 0
    time_scale: float = 1.0
    profile: list[str] = field(default_factory=list)  # --profile: one line per reaction

    def as_dict(self) -> Obj:
        return {"benchmark": "guard", **self.__dict__}


def measure(nodes: int, takeovers: int, steady_seconds: float, *, time_scale: float = 1.0,
            timeout: float = 900.0, guard_log: Path | None = None,
            profile: bool = False,
            api_write_ms: float = DEFAULT_WRITE_SECONDS * 1000) -> Figures:
    state = applied_state()
    _note(f"state from an 8-node apply; seeding {nodes} nodes (mixed)")
    with SimCluster(nodes=nodes, stack="mixed", operator_release=FUTURE_COEXISTENCE,
                    time_scale=time_scale, operator_reconcile_seconds=RESYNC_SECONDS) as sim, \
            tempfile.TemporaryDirectory(prefix="dcgm-bench-guard-") as tmp:
        sim.store.create(kinds.CONFIGMAP, state)
        if api_write_ms > 0:
            sim.server.model_writes(WriteLatency(sim.clock, api_write_ms / 1000.0))
        tracker = Tracker(sim)
        gpu_nodes = len(tracker.names["nvidia-dcgm"].nodes)
        fig = Figures(nodes, gpu_nodes, seed_s=sim.seed_seconds, time_scale=time_scale,
                      api_write_ms=api_write_ms)
        proxy = CountingProxy(sim.url)
        kubeconfig = write_kubeconfig(Path(tmp) / "kubeconfig", proxy.url, NS)
        err_path = Path(tmp) / "guard.log"
        start_mark = sim.server.log.last_seq
        with open(err_path, "wb") as err:
            proc = subprocess.Popen([*CLI, "guard", "--kubeconfig", str(kubeconfig)],
                                    stdout=subprocess.DEVNULL, stderr=err,
                                    stdin=subprocess.DEVNULL)
        hwm = _HighWater(proc.pid)
        tracker.pid = proc.pid
        began, sim_began = time.monotonic(), sim.clock.now()
        try:
            _note(f"guard pid {proc.pid}; waiting until it shares both names to "
                  f"{gpu_nodes} nodes")
            tracker.wait(tracker.shared, timeout, "initial share")
            fig.share_real_s = time.monotonic() - began
            fig.share_sim_s = sim.clock.now() - sim_began
            fig.rss_shared_mb = _vm_hwm_mb(proc.pid)
            _note(f"shared in {fig.share_real_s:.1f} s; VmHWM {fig.rss_shared_mb:.0f} MB")

            time.sleep(min(5.0, steady_seconds))  # the passes the share itself triggered
            # The guard's start lists what it watches, which counts as a change: the verdict
            # that is owed comes within verdict_seconds of the first. A window that long waits
            # for it first (and for its read to end), so it shows a quiet cluster, and weighs
            # it; a shorter window ends before it anyway. The first verdict is taken at the
            # start, but its whole read may still be under way after the share: the owed one
            # is the second whole read since the guard started.
            if steady_seconds >= GuardSettings().verdict_seconds:
                owed_t0 = time.monotonic()
                _note("waiting for the verdict the guard's start is owed")
                _poll(lambda: len(_verdict_reads(sim.server.log.since(start_mark))) >= 2,
                      GuardSettings().verdict_seconds + timeout, "the owed verdict")
                owed_mark = _verdict_reads(sim.server.log.since(start_mark))[1].seq - 1
                _poll(lambda: _quiet_for(sim, 3.0, owed_mark), timeout,
                      "the owed verdict's read")
                fig.owed_wait_s = time.monotonic() - owed_t0
                fig.verdict_bytes = _read_bytes(sim.server.log.since(owed_mark))
            mark = sim.server.log.last_seq
            up0, down0 = proxy.totals()
            t0 = time.monotonic()
            _note(f"steady state for {steady_seconds:.0f} s")
            time.sleep(steady_seconds)
            up1, down1 = proxy.totals()
            fig.steady_real_s = time.monotonic() - t0
            fig.steady_bytes = (up1 - up0) + (down1 - down0)
            fig.steady_bytes_down = down1 - down0
            fig.steady_requests = len(sim.server.log.since(mark))
            fig.verdicts_in_window = len(_verdict_reads(sim.server.log.since(mark)))
            hour = 3600.0 / fig.steady_real_s
            fig.bytes_per_hour = fig.steady_bytes * hour
            fig.requests_per_hour = fig.steady_requests * hour
            fig.rss_steady_mb = _vm_hwm_mb(proc.pid)
            _note(f"steady: {fig.steady_bytes} B, {fig.steady_requests} requests, "
                  f"{fig.verdicts_in_window} verdicts; VmHWM {fig.rss_steady_mb:.0f} MB")

            for i in range(takeovers):
                before = sim.server.log.last_seq
                cp = sim.store.list(kinds.CLUSTER_POLICY)[0][0]
                sim.store.delete(kinds.CLUSTER_POLICY, None, cp["metadata"]["name"])
                tracker.wait(tracker.aliases_again, timeout, "aliases created again")
                _poll(lambda: not any(sim.store.find(kinds.DAEMONSET, NS, ds)
                                      for ds in STABLE), timeout, "ClusterPolicy DaemonSets gone")
                sim.store.create(kinds.CLUSTER_POLICY, seeded_cr("clusterpolicy"))
                tracker.wait(functools.partial(tracker.reacted, i + 1), timeout,
                             "shared again")
                last = [n.reactions[-1] for n in tracker.names.values()]
                fig.rss_after_takeover_mb.append(_vm_hwm_mb(proc.pid))
                _note(f"takeover {i + 1}: shared again after "
                      f"{', '.join(f'{r:.2f}' for r in last)} simulated s; "
                      f"VmHWM {fig.rss_after_takeover_mb[-1]:.0f} MB")
                if profile:
                    records = sim.server.log.since(before)
                    for name, n in tracker.names.items():
                        wall, reaction = n.windows[-1]
                        fig.profile.append(guardprofile.breakdown(
                            name, wall, reaction, records, STATE_CONFIGMAP).line()
                            + f"; simulated {n.reactions[-1] * 1000:.0f} ms, guard CPU "
                              f"{n.cpu[-1] * 1000:.0f} ms")
                        _note(f"  {fig.profile[-1]}")
            fig.takeovers = takeovers
            fig.reactions_s = [r for n in tracker.names.values() for r in n.reactions]
            fig.reactions_real_s = [r for n in tracker.names.values() for r in n.real]
            if fig.reactions_s:
                fig.reaction_median_s = statistics.median(fig.reactions_s)
                fig.reaction_max_s = max(fig.reactions_s)
                fig.reaction_real_median_s = statistics.median(fig.reactions_real_s)
                fig.reaction_real_max_s = max(fig.reactions_real_s)
                fig.reaction_cpu_s = [c for n in tracker.names.values() for c in n.cpu]
                fig.reaction_cpu_median_s = statistics.median(fig.reaction_cpu_s)
        finally:
            tracker.close()
            if proc.poll() is None:
                fig.rss_peak_mb = hwm.last()
                proc.send_signal(signal.SIGTERM)
            killer = threading.Timer(60, proc.kill)
            killer.start()
            os.wait4(proc.pid, 0)
            killer.cancel()
            proc.returncode = 0
            hwm.stop()
            fig.rss_peak_mb = max(hwm.last(), fig.rss_peak_mb)
            proxy.close()
            if guard_log is not None:
                guard_log.write_bytes(err_path.read_bytes())
    return fig


def _table(fig: Figures) -> str:
    def s(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"
    rows = [
        ("nodes (GPUCluster)", f"{fig.nodes} ({fig.gpucluster_nodes})"),
        ("first share, real s", f"{fig.share_real_s:.1f}"),
        ("guard peak RSS MB (shared / steady / whole run)",
         f"{fig.rss_shared_mb:.0f} / {fig.rss_steady_mb:.0f} / {fig.rss_peak_mb:.0f}"),
        (f"takeover reaction, simulated s (median / max of {len(fig.reactions_s)})",
         f"{s(fig.reaction_median_s)} / {s(fig.reaction_max_s)}"
         + (f" (API writes {fig.api_write_ms:g} ms each)" if fig.api_write_ms else "")),
        ("the same, real s (the sim's own write handling included)",
         f"{s(fig.reaction_real_median_s)} / {s(fig.reaction_real_max_s)}"),
        ("the guard's CPU s within a reaction, median",
         f"{s(fig.reaction_cpu_median_s)}"),
        (f"steady API bytes per hour ({fig.steady_real_s:.0f} s measured)",
         f"{fig.bytes_per_hour / 1e6:.1f} MB "
         f"({fig.steady_bytes_down / max(1, fig.steady_bytes):.0%} received)"),
        ("steady requests per hour", f"{fig.requests_per_hour:.0f}"),
        ("verdicts (whole reads) in the steady window", f"{fig.verdicts_in_window}"),
        (f"one verdict's bytes (owed {fig.owed_wait_s:.0f} s after the share)",
         f"{fig.verdict_bytes / 1e6:.1f} MB"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.guard",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=15000)
    parser.add_argument("--takeovers", type=int, default=5)
    parser.add_argument("--steady-seconds", type=float, default=300.0)
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="real seconds per simulated second (1.0: the guard's real-time "
                             "throttles count as they would in a cluster)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="real seconds each wait may take")
    parser.add_argument("--guard-log", type=Path, help="copy the guard's stderr here")
    parser.add_argument("--profile", action="store_true",
                        help="print where each reaction went, from the sim's request log "
                             "(benchmarks/guardprofile.py)")
    parser.add_argument("--api-write-ms", type=float, default=DEFAULT_WRITE_SECONDS * 1000,
                        help="simulated ms each API write takes, as on a real API server, "
                             "instead of the sim's own handling time (dcgm_sim/apilatency.py; "
                             "0: the sim's own time)")
    args = parser.parse_args(argv)
    fig = measure(args.nodes, args.takeovers, args.steady_seconds, time_scale=args.time_scale,
                  timeout=args.timeout, guard_log=args.guard_log, profile=args.profile,
                  api_write_ms=args.api_write_ms)
    print(_table(fig))
    print(json.dumps(fig.as_dict(), sort_keys=True))


if __name__ == "__main__":
    main()
