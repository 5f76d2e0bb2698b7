"""Every command the CLI prints runs as written and acts on the cluster it was printed for
(docs/runbook.md, "Exit codes"): the verdict checks' fixes, the `run` line's, `status`'s
`resume:`, an error's `fix:` line. Each case runs the real CLI in a subprocess, takes the
command from its output, runs it exactly as printed (`dcgm-migrate` is this checkout's
`python -m migrator`, `kubectl` the one on PATH) and checks what it did to the cluster."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from migrator.model import kinds
from tests.conftest import new_operand_versions
from tests.helpers import crash
from tests.helpers.printed import run_printed, stray_pod
from tests.reliability.conftest import NS, Env

DCGM = "nvidia.com/gpu-operator.dcgm"
COMMAND = re.compile(r"`((?:dcgm-migrate|kubectl) [^`]+)`")


def two_contexts(intended: Env, other: Env, path: Path) -> str:
    """One kubeconfig holding both clusters, its current-context the *other* one: a bastion
    where a command that lacks `--context` reaches the wrong cluster."""
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "preferences": {},
                           "clusters": [], "users": [], "contexts": [],
                           "current-context": "other"}
    for name, env in (("intended", intended), ("other", other)):
        one = yaml.safe_load(Path(env.kubeconfig).read_text())
        doc["clusters"].append({"name": name, "cluster": one["clusters"][0]["cluster"]})
        doc["users"].append({"name": name, "user": one["users"][0]["user"]})
        doc["contexts"].append({"name": name, "context": {"cluster": name, "user": name}})
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def printed(text: str) -> list[str]:
    """Every `dcgm-migrate …` / `kubectl …` command printed in backticks (a table folds long
    lines at a space: the fold is that space again)."""
    return [re.sub(r"\s*\n\s*", " ", c) for c in COMMAND.findall(text)]


def selects(command: str, kubeconfig: str, context: str) -> bool:
    argv = shlex.split(command)
    pairs = {argv[i]: argv[i + 1] for i in range(len(argv) - 1)}
    return pairs.get("--kubeconfig") == kubeconfig and pairs.get("--context") == context


def has(env: Env, kind: Any, name: str) -> bool:
    return any(o["metadata"]["name"] == name for o in env.sim.store.list(kind, NS)[0])


def test_printed_commands_reach_the_cluster_they_were_printed_for(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    """Two clusters in one kubeconfig, current-context the other one. A run with `--context
    intended` prints its verdict's fixes, its `run` line, an error's `fix:` line and
    `status`'s `resume:`; each names `--kubeconfig` and `--context intended`, and run as
    written it changes the intended cluster and leaves the other untouched."""
    intended, other = fresh(monitor=False), fresh(monitor=False)
    config = two_contexts(intended, other, tmp_path / "config with space")
    where = ("--kubeconfig", config, "--context", "intended")

    labelled = crash.run(None, "apply", "--phase", "1", "--yes", "--settle", "0s", *where)
    assert labelled.code == 0, labelled.output
    commands = printed(labelled.output)
    fix = next(c for c in commands if shlex.split(c)[1:4] == ["apply", "--phase", "2"])
    assert all(selects(c, config, "intended") for c in commands), commands
    assert f"--kubeconfig '{config}'" in fix  # shell-quoted: the path has a space
    run_line = next(line for line in labelled.stdout.splitlines() if line.startswith("run OK"))
    assert all(selects(c, config, "intended") for c in printed(run_line)), run_line

    assert run_printed(fix, tmp_path).code == 0
    assert has(intended, kinds.SERVICE, "nvidia-dcgm")
    assert not has(other, kinds.SERVICE, "nvidia-dcgm")
    assert not has(other, kinds.CONFIGMAP, "dcgm-migrate-state")

    # A gate stops phase 3: its error's fix line and `status`'s resume: point at `intended`.
    stray_pod(intended.sim, "dcgm-debug", {DCGM: "true"})
    # (`--rolling`: the resume line repeats the stopped run's options)
    stopped = crash.run(None, "apply", "--phase", "3", "--rolling", "--yes", "--settle", "0s",
                        *where)
    assert stopped.code == 1, stopped.output
    assert all(selects(c, config, "intended") for c in printed(stopped.output))
    status = crash.run(None, "status", *where)
    assert status.code == 1, status.output
    [resume] = re.findall(r"^\s*resume: (.+?)\n\s*\n", status.stdout, re.M | re.S)
    resume = re.sub(r"\s*\n\s*", " ", resume)
    assert selects(resume, config, "intended"), resume
    assert shlex.split(resume)[1:5] == ["apply", "--phase", "3", "--rolling"], resume
    assert all(selects(c, config, "intended") for c in printed(status.output))
    as_json = crash.run(None, "status", "-o", "json", *where)
    assert json.loads(as_json.stdout)["run"]["resume"] == resume

    # An error's fix line: the wrong namespace, refused; its command runs against `intended`.
    wrong = crash.run(None, "status", "-n", "default", *where)
    assert wrong.code == 2, wrong.output
    [fix_line] = [line for line in wrong.stderr.splitlines() if line.startswith("fix: ")]
    [again] = printed(fix_line)
    assert selects(again, config, "intended"), fix_line
    assert run_printed(again, tmp_path).code == 1  # status of `intended`: interrupted
    assert "resume:" in run_printed(again, tmp_path).stdout

    intended.sim.store.delete(kinds.POD, NS, "dcgm-debug")
    assert run_printed(resume, tmp_path).code == 0
    switched = intended.sim.store.get(kinds.SERVICE, NS, "nvidia-dcgm")
    assert switched["spec"]["selector"] == {DCGM: "true"}
    assert not has(other, kinds.SERVICE, "nvidia-dcgm")
    assert not has(other, kinds.CONFIGMAP, "dcgm-migrate-state")


def test_only_the_options_given_are_added(fresh: Callable[..., Env]) -> None:
    """Without `--context`, none is invented: the commands carry the `--kubeconfig` and `-n`
    the run was given, and nothing else."""
    env = fresh(monitor=False)
    labelled = crash.run(env.kubeconfig, "apply", "--phase", "1", "--yes", "--settle", "0s",
                         "-n", NS)
    assert labelled.code == 0, labelled.output
    commands = printed(labelled.output)
    assert commands
    for command in commands:
        argv = shlex.split(command)
        assert "--context" not in argv, command
        assert argv[argv.index("--kubeconfig") + 1] == env.kubeconfig, command
        assert "-n" in argv or "--namespace" in argv, command


# ---- what each failure's fix names, run as printed -------------------------------------------

APPLY3 = ("apply", "--phase", "3", "--yes", "--settle", "0s")


def verified(env: Env) -> tuple[crash.Proc, dict[str, dict[str, Any]]]:
    """`verify -o json` and its failed checks by name."""
    done = crash.run(env.kubeconfig, "verify", "-o", "json")
    doc = json.loads(done.stdout)
    return done, {c["name"]: c for c in doc["verdict"]["checks"] if not c["ok"]}


def gates(env: Env) -> dict[str, bool]:
    doc = json.loads(crash.run(env.kubeconfig, "verify", "-o", "json").stdout)
    return {g["name"]: g["ok"] for p in doc["phases"] for g in p["gates"]}


def test_a_failed_node_fix_names_the_node_and_its_pod(fresh: Callable[..., Env],
                                                      tmp_path: Path) -> None:
    """A node stops reporting after the migration: `nodes-covered` says what helps — the
    node, its pod — as commands that work as printed, never a phase's `apply`, which would
    answer with the same fix."""
    env = fresh(monitor=False)
    assert crash.run(env.kubeconfig, *APPLY3).code == 0
    pod = next(p for p in env.sim.store.list(kinds.POD, NS)[0]
               if p["metadata"]["name"].startswith("nvidia-dcgm-dra-"))
    node = pod["spec"]["nodeName"]
    env.sim.fail_node(node)
    env.sim.wait_for(lambda: "nodes-covered/nvidia-dcgm" in verified(env)[1], 60)
    done, failed = verified(env)
    assert done.code == 1
    for name in ("nodes-covered/nvidia-dcgm", "nodes-covered/nvidia-dcgm-exporter"):
        fix = failed[name]["fix"]
        assert "apply" not in fix and node in fix, fix
        commands = printed(fix)
        assert commands and all(shlex.split(c)[0] == "kubectl" for c in commands), fix
        described = [run_printed(c, tmp_path) for c in commands]
        assert all(d.code == 0 for d in described), [d.output[-500:] for d in described]
        assert any(f"Name:               {node}" in d.stdout and "NodeStatusUnknown" in d.stdout
                   for d in described), [d.stdout[:300] for d in described]
    env.sim.heal_node(node)


def test_an_alias_deleted_after_the_switch_is_restored_by_its_fix(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    """An alias deleted after phase 3: the one command every fix names restores everything
    that was completed — the alias, on the common selector — so `selector-holds` passes."""
    env = fresh(monitor=False)
    assert crash.run(env.kubeconfig, *APPLY3).code == 0
    env.sim.store.delete(kinds.SERVICE, NS, "nvidia-dcgm")
    done, failed = verified(env)
    assert done.code == 1 and "stable-name/nvidia-dcgm" in failed, failed
    output = crash.run(env.kubeconfig, "verify").output + done.stdout
    applies = {c for c in printed(output) if shlex.split(c)[1] in ("apply", "rollback")}
    assert applies == {f"dcgm-migrate apply --phase 3 --kubeconfig {env.kubeconfig}"}, applies
    [fix] = applies
    assert run_printed(fix, tmp_path).code == 0
    assert env.sim.store.get(kinds.SERVICE, NS, "nvidia-dcgm")["spec"]["selector"] == {
        DCGM: "true"}
    assert gates(env)["selector-holds/nvidia-dcgm"]
    assert verified(env)[0].code == 0


def _rolled_out(env: Env) -> bool:
    for name in ("nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra"):
        ds = env.sim.store.get(kinds.DAEMONSET, NS, name)
        st = ds.get("status") or {}
        if not (st.get("observedGeneration", 0) >= ds["metadata"]["generation"]
                and st.get("updatedNumberScheduled") == st.get("desiredNumberScheduled")
                == st.get("numberAvailable")):
            return False
    return True


def test_an_operator_rerender_without_the_guard_is_fixed_as_the_runbook_says(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    """The operator re-renders the DaemonSets without the common labels and no guard runs:
    every check's fix says what the runbook says ("rollback --phase 3 now, then apply --phase
    3"); run as printed, the rollback reports OK (it did its job), and the apply restores the
    migration."""
    env = fresh(monitor=False, operator_reconcile_seconds=0.5)
    assert crash.run(env.kubeconfig, *APPLY3).code == 0
    new_operand_versions(env.sim.store)
    env.sim.wait_for(lambda: all(
        DCGM not in p["metadata"]["labels"] for p in env.sim.store.list(kinds.POD, NS)[0]
        if p["metadata"]["name"].startswith("nvidia-dcgm-dra-")), 60)
    env.sim.wait_for(lambda: _rolled_out(env), 60)
    done, failed = verified(env)
    assert done.code == 1
    assert "pods-labelled/nvidia-dcgm-dra" in failed and "nodes-covered/nvidia-dcgm" in failed
    expected = [f"dcgm-migrate rollback --phase 3 --kubeconfig {env.kubeconfig}",
                f"dcgm-migrate apply --phase 3 --kubeconfig {env.kubeconfig}"]
    for name in ("pods-labelled/nvidia-dcgm-dra", "nodes-covered/nvidia-dcgm"):
        assert printed(failed[name]["fix"]) == expected, failed[name]["fix"]
    table = crash.run(env.kubeconfig, "verify").output
    assert {c for c in printed(table) if shlex.split(c)[1] in ("apply", "rollback")} == set(
        expected), table
    rollback = run_printed(expected[0], tmp_path)
    assert rollback.code == 0, rollback.output
    assert "run OK" in rollback.stdout, rollback.stdout
    assert env.sim.store.get(kinds.SERVICE, NS, "nvidia-dcgm")["spec"]["selector"] == {
        "app": "nvidia-dcgm-dra"}
    assert run_printed(expected[1], tmp_path).code == 0
    assert verified(env)[0].code == 0
    assert env.sim.store.get(kinds.SERVICE, NS, "nvidia-dcgm")["spec"]["selector"] == {
        DCGM: "true"}
