"""Project-wide fixtures: a running simulated GPU cluster (`sim`), a factory for others
(`make_sim`), the controllers on a bare seeded Store, without HTTP (`make_bare`), and the API
server alone over a store holding just the namespace (`empty_api`)."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from dcgm_sim.clock import SimClock
from dcgm_sim.cluster import SimCluster, wait_for
from dcgm_sim.controllers import ControllerSet
from dcgm_sim.controllers.kubelet import PODS_READY_ANNOTATION
from dcgm_sim.controllers.releases import DEFAULT as DEFAULT_RELEASE
from dcgm_sim.seed import seed
from dcgm_sim.server import ApiServer
from dcgm_sim.store import Store, StoreError
from migrator.model import kinds
from tests.helpers import built_image

T = TypeVar("T")
Obj = dict[str, Any]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order that keeps 2 cores busy. The tests that run the built image (the `image`
    fixture) go last: `.ci/run` starts the suite while images/build still runs, and they wait
    for it. Under pytest-xdist, the tests marked `slow` (crash-anywhere's shards, the fresh-venv
    installs: most of a minute each) open the workers' shares, dealt round-robin, instead of
    waiting in one worker's share until the end of the run. `--dist worksteal` first hands
    worker i the i-th of as many equal runs of the collection as there are workers (and idle
    workers later steal from the end of a busy one's queue): each run here starts with its slow
    tests, dealt longest first to the share with the least so far (`slow(seconds=…)`: a test's
    own wall time in CI, roughly), so that no worker starts with two of the longest back to back
    (round-robin gave one worker the fresh-venv install and a crash-anywhere shard). Without
    xdist (or with one worker) the order is otherwise the collection's."""
    needs_image = [item for item in items if "image" in getattr(item, "fixturenames", ())]
    later = {id(item) for item in needs_image}
    if any(os.environ.get(f"{variable}_BUILD_RC")  # their wait is not their run time
           for variable in built_image.IMAGES.values()):
        for item in needs_image:
            own = item.get_closest_marker("timeout")
            limit = float(own.args[0]) if own and own.args else float(
                config.getini("timeout") or 0)
            item.add_marker(pytest.mark.timeout(limit + built_image.BUILD_WAIT_SECONDS))
    items[:] = [item for item in items if id(item) not in later] + needs_image
    workerinput = getattr(config, "workerinput", None)
    workers = int(workerinput["workercount"]) if workerinput else 1
    if workers < 2:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if not slow:
        return
    chosen = {id(item) for item in slow}
    rest = [item for item in items if id(item) not in chosen]
    ordered: list[pytest.Item] = []
    remaining = len(items)
    shares = _dealt(slow, workers)
    for i in range(workers):  # the sizes worksteal's first distribution gives each worker
        size = remaining // (workers - i)
        remaining -= size
        share = shares[i]
        # A share of more slow tests than its size (a -k that keeps mostly slow ones) takes
        # none of the rest.
        fill = max(0, size - len(share))
        ordered += share + rest[:fill]
        rest = rest[fill:]
    ordered += rest
    items[:] = ordered


def _slow_seconds(item: pytest.Item) -> float:
    marker = item.get_closest_marker("slow")
    return float(marker.kwargs.get("seconds", 60)) if marker is not None else 0.0


def _dealt(slow: list[pytest.Item], workers: int) -> list[list[pytest.Item]]:
    """Longest first, each to the share with the fewest seconds so far (the first such share
    on a tie): the same shares on every worker, as xdist requires one order."""
    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for item in sorted(slow, key=_slow_seconds, reverse=True):  # stable: ties keep their order
        i = loads.index(min(loads))
        shares[i].append(item)
        loads[i] += _slow_seconds(item)
    return shares


PEER_SUITE = "peer-suite"  # the user_properties key of tests/peers' counts


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the peer suites' counts (tests/peers: `("peer-suite", "<suite>: N cases run, P
    pass, U unsupported")` in a test's user_properties), which travel with the reports from
    pytest-xdist's workers, so `.ci/run` shows them whatever the worker count."""
    lines: list[str] = []
    for reports in terminalreporter.stats.values():
        for report in reports:
            for key, value in getattr(report, "user_properties", ()):
                if key == PEER_SUITE and getattr(report, "when", "call") == "call" \
                        and str(value) not in lines:
                    lines.append(str(value))
    if lines:
        terminalreporter.write_sep("=", "peer suites")
        for line in sorted(lines):
            terminalreporter.write_line(line)


@pytest.fixture
def empty_api() -> Iterator[ApiServer]:
    """The API server over a store with only the `gpu-operator` namespace: no controllers."""
    store = Store()
    store.create(kinds.NAMESPACE, {"metadata": {"name": "gpu-operator"}})
    with ApiServer(store) as server:
        yield server


@pytest.fixture
def make_sim() -> Iterator[Callable[..., SimCluster]]:
    """`make_sim(nodes=5, stack="clusterpolicy", ...)`: started `SimCluster`s (any
    constructor argument; time_scale defaults to 0.02), all stopped at teardown."""
    made: list[SimCluster] = []

    def make(**kwargs: Any) -> SimCluster:
        kwargs.setdefault("time_scale", 0.02)
        sim = SimCluster(**kwargs)
        made.append(sim)
        return sim.start()

    yield make
    for sim in reversed(made):
        sim.stop()


@pytest.fixture
def sim(make_sim: Callable[..., SimCluster]) -> SimCluster:
    """A 3-node GPUCluster-stack simulated cluster, stopped after the test."""
    return make_sim(nodes=3, stack="gpucluster")


def edit_object(store: Store, kind: kinds.Kind, namespace: str | None, name: str,
                change: Callable[[Obj], None], attempts: int = 5) -> Obj:
    """Read-modify-write (with resourceVersion), retried on a 409 Conflict as a client
    would (client-go's RetryOnConflict): a controller may write the object in between."""
    for attempt in range(attempts):
        obj = copy.deepcopy(store.get(kind, namespace, name))
        change(obj)
        try:
            return store.update(kind, obj)
        except StoreError as exc:
            if exc.code != 409 or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def edit_cr(store: Store, kind: kinds.Kind, change: Callable[[Obj], None]) -> Obj:
    """Edit the cluster's CR of `kind` (the first listed) as a user's `kubectl edit` would:
    `edit_object`, retried on a conflict, since its operator writes the CR's status meanwhile."""
    name = store.list(kind)[0][0]["metadata"]["name"]
    return edit_object(store, kind, None, name, change)


def on_delete(ds: Obj) -> None:
    """A DaemonSet edit (for `edit_object`): the `OnDelete` update strategy, which rolls no
    pod until it is deleted."""
    ds["spec"]["updateStrategy"] = {"type": "OnDelete"}


def pods_ready_on(store: Store, node: str, ready: bool) -> Obj:
    """The sim's kubelet on `node` lets its pods turn Ready, or holds every one back
    (`PODS_READY_ANNOTATION`): a Node edit, retried on a conflict (`edit_object`)."""
    def mark(obj: Obj) -> None:
        obj["metadata"].setdefault("annotations", {})[PODS_READY_ANNOTATION] = \
            "true" if ready else "false"

    return edit_object(store, kinds.NODE, None, node, mark)


def new_operand_versions(store: Store) -> Obj:
    """An operator upgrade or CR edit: new DCGM and DCGM Exporter versions in the GPUCluster,
    so the DaemonSets it renders change."""
    def newer(cr: Obj) -> None:
        cr["spec"]["dcgm"]["version"] = "4.5.3-1-ubuntu22.04"
        cr["spec"]["dcgmExporter"]["version"] = "4.5.2-4.8.1-distroless"

    return edit_cr(store, kinds.GPU_CLUSTER, newer)


@dataclass
class Bare:
    """A seeded Store with the controllers running on it, and shortcuts for tests."""

    store: Store
    controllers: ControllerSet
    namespace: str = "gpu-operator"
    samplers: list[Callable[..., None]] = field(default_factory=list)

    def wait_idle(self, timeout: float = 10.0) -> None:
        assert self.controllers.wait_idle(timeout), "controllers still busy"

    def wait_for(self, predicate: Callable[[], T], timeout: float = 10.0) -> T:
        return wait_for(self.store, predicate, timeout)

    def get(self, kind: kinds.Kind, name: str, namespace: str | None = None) -> Obj:
        ns = (namespace or self.namespace) if kind.namespaced else None
        return self.store.get(kind, ns, name)

    def edit(self, kind: kinds.Kind, name: str, change: Callable[[Obj], None],
             namespace: str | None = None) -> Obj:
        """`edit_object` in this store's namespace (or `namespace`)."""
        ns = (namespace or self.namespace) if kind.namespaced else None
        return edit_object(self.store, kind, ns, name, change)

    def pods(self, app: str) -> list[Obj]:
        items, _ = self.store.list(kinds.POD, self.namespace)
        return [p for p in items if (p["metadata"].get("labels") or {}).get("app") == app]

    def annotate_node(self, node: str, key: str, value: str | None) -> None:
        def change(obj: Obj) -> None:
            annotations = obj["metadata"].setdefault("annotations", {})
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        self.edit(kinds.NODE, node, change)

    def stop(self) -> None:
        self.controllers.stop()
        for fn in self.samplers:
            self.store.unsubscribe(fn)


@pytest.fixture
def make_bare() -> Iterator[Callable[..., Bare]]:
    """`make_bare(nodes=3, stack="gpucluster", time_scale=0.01, start=True, **ControllerSet
    options)`: the controllers on a seeded Store, no API server; stopped at teardown. The seed
    follows `operator_release` (`mixed`/`both` need `future-coexistence`)."""
    made: list[Bare] = []

    def make(nodes: int = 3, stack: str = "gpucluster", *, time_scale: float = 0.01,
             start: bool = True, gpucluster_dcgm: bool = True, **options: Any) -> Bare:
        store = Store()
        seed(store, nodes=nodes, stack=stack, gpucluster_dcgm=gpucluster_dcgm,
             release=options.get("operator_release", DEFAULT_RELEASE))
        bare = Bare(store, ControllerSet(store, SimClock(time_scale), **options))
        made.append(bare)
        if start:
            bare.controllers.start()
        return bare

    yield make
    for bare in reversed(made):
        bare.stop()
