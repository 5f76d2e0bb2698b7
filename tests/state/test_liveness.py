"""Is a lock's holder provably gone (engine/state/lock.py): /proc/<pid>/stat read with a
command name that holds spaces and parentheses, the pod this run is (downward API, service
account, host name), and a holder that ran in a pod judged by that pod — gone when it no
longer exists or has stopped, maybe alive when it runs or cannot be read; nothing is judged
from another host's pid."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from migrator.engine.state import lock as liveness
from migrator.engine.state.lock import HolderCheck, LockInfo, Process
from migrator.errors import APIForbidden

HERE = Process("laptop", 100, 5, "boot-1", "pid:[1]")
POD = "gpu-operator/dcgm-migrate-apply-x7k2q"


def _stat(comm: str, state: str, started: int) -> str:
    rest = " ".join(["1"] * 16)  # fields 5..20
    return f"4242 ({comm}) {state} 1 {rest} 0 {started} 99 0\n"


def test_stat_is_read_after_the_command_names_last_parenthesis() -> None:
    assert liveness.parse_stat(_stat("python3", "S", 777)) == ("S", 777)
    assert liveness.parse_stat(_stat("a) b (c", "Z", 12)) == ("Z", 12)


def _proc(tmp_path: Path, pid: int, state: str, started: int) -> Path:
    (tmp_path / str(pid)).mkdir()
    (tmp_path / str(pid) / "stat").write_text(_stat("dcgm-migrate", state, started))
    return tmp_path


@pytest.mark.parametrize("state, started, gone", [
    (None, 0, "its process (pid 4242 on laptop) no longer runs"),
    ("Z", 7, "its process (pid 4242 on laptop) has exited"),
    ("S", 8, "pid 4242 on laptop is another process now (started after the holder's)"),
    ("S", 7, None),
])
def test_a_holder_of_this_host_by_its_pid_and_start_time(
        tmp_path: Path, state: str | None, started: int, gone: str | None) -> None:
    proc = _proc(tmp_path, 4242, state, started) if state else tmp_path
    holder = Process("laptop", 4242, 7, "boot-1", "pid:[1]")
    assert liveness.gone_from_this_host(holder, HERE, proc) == gone


def test_no_pid_of_another_host_boot_or_pid_namespace_is_judged(tmp_path: Path) -> None:
    for other in (Process("bastion", 4242, 7, "boot-1", "pid:[1]"),
                  Process("laptop", 4242, 7, "boot-2", "pid:[1]"),
                  Process("laptop", 4242, 7, "boot-1", "pid:[2]"),
                  Process("laptop", 4242, 7, None, None)):
        assert liveness.gone_from_this_host(other, HERE, tmp_path) is None


def test_the_pod_this_run_is(tmp_path: Path) -> None:
    sa = tmp_path / "namespace"
    sa.write_text("gpu-operator\n")
    assert liveness.pod_of_this_process({}, sa) is None  # not in a cluster
    assert liveness.pod_of_this_process(
        {"POD_NAME": "job-abc", "POD_NAMESPACE": "ops"}, sa) == "ops/job-abc"
    in_cluster = liveness.pod_of_this_process({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, sa)
    assert in_cluster is not None and in_cluster.startswith("gpu-operator/")


def _lookup(pods: Mapping[str, Any] | Exception) -> liveness.PodLookup:
    def get(namespace: str, name: str) -> Mapping[str, Any] | None:
        if isinstance(pods, Exception):
            raise pods
        found: Mapping[str, Any] | None = pods.get(f"{namespace}/{name}")
        return found
    return get


def _info(process: Process | None) -> LockInfo:
    return LockInfo("root@dcgm-migrate-apply-x7k2q pid 1", "t", None, None, process)


@pytest.mark.parametrize("pods, gone", [
    ({}, f"its pod {POD} no longer exists"),
    ({POD: {"status": {"phase": "Failed"}}}, f"its pod {POD} has stopped (Failed)"),
    ({POD: {"status": {"phase": "Running"}}}, None),
    (APIForbidden("pods is forbidden", status=403), None),
])
def test_a_holder_that_ran_in_a_pod_by_that_pod(pods: Any, gone: str | None) -> None:
    holder = Process("dcgm-migrate-apply-x7k2q", 1, 9, "node-boot", "pid:[9]", POD)
    assert HolderCheck(_lookup(pods), HERE)(_info(holder)) == gone


def test_an_earlier_container_of_this_very_pod_is_gone() -> None:
    here = Process("dcgm-migrate-apply-x7k2q", 1, 50, "node-boot", "pid:[10]", POD)
    before = Process("dcgm-migrate-apply-x7k2q", 1, 9, "node-boot", "pid:[9]", POD)
    running = {POD: {"status": {"phase": "Running"}}}
    assert HolderCheck(_lookup(running), here)(_info(before)) == (
        f"pod {POD} restarted its container since")


def test_a_lock_without_a_recorded_process_is_judged_by_its_lease() -> None:
    assert HolderCheck(_lookup({}), HERE)(_info(None)) is None
    assert Process.decode("not json") is None and Process.decode(None) is None
    assert Process.decode(HERE.encode()) == HERE
