"""Bad input matrix (docs/design.md, "Command line"): every wrong phase, namespace, kubeconfig,
context, output format, duration, plan file, state ConfigMap or cluster gets its documented exit
code, one clear sentence plus what to do on stderr, no traceback, and zero writes (from the sim's
request log)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from dcgm_sim.cluster import SimCluster
from migrator.model import kinds
from tests.conftest import edit_object
from tests.helpers import cli, crash
from tests.reliability.conftest import APPLY, NS, Env

STATE_CM = "dcgm-migrate-state"
Setup = Callable[[SimCluster, Path], list[str]]


@dataclass(frozen=True)
class Case:
    id: str
    setup: Setup  # prepares the cluster/files, returns the command line (no --kubeconfig)
    code: int
    says: str  # a phrase the one-sentence error must contain
    stack: str = "gpucluster"
    usage: bool = False  # a command-line usage error (click's format: Error: + Try --help)


def args(*argv: str) -> Setup:
    return lambda sim, tmp: list(argv)


def kubeconfig_file(text: str, *argv: str) -> Setup:
    def setup(sim: SimCluster, tmp: Path) -> list[str]:
        path = tmp / "bad-kubeconfig"
        path.write_text(text)
        return [*argv, "--kubeconfig", str(path)]
    return setup


def _state_cm(sim: SimCluster, text: str, *, checksum: str | None = None,
              ours: bool = True) -> None:
    sim.store.create(kinds.CONFIGMAP, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": STATE_CM, "namespace": NS,
                     "labels": {"app.kubernetes.io/managed-by": "dcgm-migrate"} if ours else {}},
        "data": {"state.json": text, "state.sha256": checksum or crash.sha256(text)},
    })


def state(text: str, *argv: str, checksum: str | None = None, ours: bool = True) -> Setup:
    def setup(sim: SimCluster, tmp: Path) -> list[str]:
        _state_cm(sim, text, checksum=checksum, ours=ours)
        return list(argv)
    return setup


def _saved_plan(sim: SimCluster, tmp: Path) -> Path:
    path = tmp / "plan.json"
    res = cli.run(sim.kubeconfig, "plan", "--out", str(path), "-o", "json")
    assert res.code == 0, res.stderr
    return path


def stale_plan(sim: SimCluster, tmp: Path) -> list[str]:
    path = _saved_plan(sim, tmp)
    # someone edits the cluster after the plan
    edit_object(sim.store, kinds.DAEMONSET, NS, "nvidia-dcgm-dra",
                lambda ds: ds["metadata"]["labels"].update(team="gpu-infra"))
    return ["apply", "--phase", "1", "--yes", "--plan", str(path)]


def tampered_plan(sim: SimCluster, tmp: Path) -> list[str]:
    path = _saved_plan(sim, tmp)
    doc = json.loads(path.read_text())
    doc["report"]["phases"][0]["changes"] = []  # hide a change, keep the checksum
    path.write_text(json.dumps(doc))
    return ["apply", "--phase", "1", "--yes", "--plan", str(path)]


def plan_for_other_namespace(sim: SimCluster, tmp: Path) -> list[str]:
    path = _saved_plan(sim, tmp)
    sim.store.create(kinds.NAMESPACE, {"metadata": {"name": "other"}})
    ds = copy.deepcopy(sim.store.get(kinds.DAEMONSET, NS, "nvidia-dcgm-exporter-dra"))
    ds["metadata"] = {"name": ds["metadata"]["name"], "namespace": "other",
                      "labels": ds["metadata"]["labels"]}
    ds.pop("status", None)
    sim.store.create(kinds.DAEMONSET, ds)  # a DCGM namespace too: only the plan file is wrong
    return ["apply", "--phase", "1", "--yes", "-n", "other", "--plan", str(path)]


def not_a_plan(sim: SimCluster, tmp: Path) -> list[str]:
    path = tmp / "plan.json"
    path.write_text('{"format": "something-else", "report": {}}')
    return ["apply", "--phase", "1", "--yes", "--plan", str(path)]


def missing_crds(sim: SimCluster, tmp: Path) -> list[str]:
    sim.server.faults.update(disabled_groups=["nvidia.com", "monitoring.coreos.com"])
    return list(APPLY)


VALID_STATE = json.dumps({"schema": 99, "namespace": NS, "stack": "gpucluster", "phases": []})

CASES = [
    Case("phase-0", args("apply", "--phase", "0", "--yes"), 2, "There is no phase 0"),
    Case("phase-4", args("apply", "--phase", "4", "--yes"), 2, "There is no phase 4"),
    Case("phase-x", args("apply", "--phase", "x", "--yes"), 2, "Invalid value for '--phase'",
         usage=True),
    Case("phase-missing", args("apply", "--yes"), 2, "Missing option '--phase'", usage=True),
    Case("rollback-phase-0", args("rollback", "--phase", "0", "--yes"), 2, "There is no phase 0"),
    Case("unknown-namespace", args("apply", "--phase", "1", "--yes", "-n", "nope"), 2,
         "Namespace 'nope' does not exist"),
    Case("unknown-namespace-status", args("status", "-n", "nope"), 2,
         "Namespace 'nope' does not exist"),
    Case("namespace-without-daemonsets", args("apply", "--phase", "1", "--yes", "-n", "default"),
         2, "No GPU Operator DCGM found in namespace 'default'"),
    Case("namespace-without-daemonsets-json", args("plan", "-n", "default", "-o", "json"), 2,
         "they run in namespace 'gpu-operator'"),
    Case("missing-kubeconfig", args("apply", "--phase", "1", "--yes", "--kubeconfig",
                                    "/nonexistent/kubeconfig"), 2, "does not exist"),
    Case("kubeconfig-not-yaml", kubeconfig_file("clusters: [\n  - {name: x\n", "status"), 2,
         "is not valid YAML"),
    Case("kubeconfig-not-a-mapping", kubeconfig_file("- just\n- a list\n", "status"), 2,
         "is not a kubeconfig"),
    Case("kubeconfig-no-contexts", kubeconfig_file("apiVersion: v1\nkind: Config\n", "status"),
         2, "defines no contexts"),
    Case("unknown-context", args("apply", "--phase", "1", "--yes", "--context", "nope"), 2,
         "Context 'nope' is not defined"),
    Case("unknown-output-format", args("plan", "-o", "xml"), 2,
         "Invalid value for '-o' / '--output'", usage=True),
    Case("unknown-option", args("apply", "--phase", "1", "--bogus"), 2, "No such option: --bogus",
         usage=True),
    Case("bad-timeout", args("apply", "--phase", "1", "--yes", "--timeout", "soon"), 2,
         "--timeout 'soon' is not a duration"),
    Case("zero-timeout", args("apply", "--phase", "1", "--yes", "--timeout", "0s"), 2,
         "leaves no time"),
    Case("negative-settle", args("rollback", "--phase", "1", "--yes", "--settle", "-5s"), 2,
         "--settle '-5s' is not a duration"),
    Case("plan-file-missing", args("apply", "--phase", "1", "--yes", "--plan",
                                   "/nonexistent/plan.json"), 2, "does not exist"),
    Case("plan-file-foreign", not_a_plan, 2, "is not a dcgm-migrate plan"),
    Case("plan-file-tampered", tampered_plan, 2, "was modified after it was saved"),
    Case("plan-file-stale", stale_plan, 4,
         "stale: changed DaemonSet/nvidia-dcgm-dra metadata.labels."),
    Case("plan-file-other-namespace", plan_for_other_namespace, 2, "made for namespace"),
    Case("plan-out-unwritable", args("plan", "--out", "/nonexistent/dir/plan.json"), 2,
         "Cannot write the plan"),
    Case("state-corrupted", state('{"schema": 1}', *APPLY, checksum="0" * 64), 3,
         "does not match its checksum"),
    Case("state-not-json", state("{not json", *APPLY), 3, "invalid JSON"),
    Case("state-wrong-schema", state(VALID_STATE, *APPLY), 3, "schema 99"),
    Case("state-wrong-shape", state('{"schema": 1, "namespace": "gpu-operator"}', *APPLY), 3,
         "does not hold a valid dcgm-migrate state"),
    Case("state-foreign-configmap", state("{}", *APPLY, ours=False), 3,
         "was not created by dcgm-migrate"),
    Case("state-foreign-configmap-unlock", state("{}", "unlock", ours=False), 3,
         "was not created by dcgm-migrate"),
    Case("state-corrupted-status", state("{}", "status", checksum="f" * 64), 3,
         "does not match its checksum"),
    Case("missing-crds", missing_crds, 2, "GPU Operator API"),
    Case("no-dcgm-at-all", args(*APPLY), 2, "No GPU Operator DCGM found", stack="none"),
    Case("rollback-never-applied", args("rollback", "--phase", "1", "--yes"), 2,
         "was never applied"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_clearly_with_zero_writes(
        case: Case, fresh: Callable[..., Env], tmp_path: Path) -> None:
    env = fresh(case.stack, monitor=False)
    argv = case.setup(env.sim, tmp_path)
    mark = env.mark()
    res = cli.run(env.kubeconfig, *argv)
    assert res.code == case.code, f"exit {res.code}, want {case.code}: {res.stderr}"
    assert env.writes(mark) == [], [(w.verb, w.resource, w.name) for w in env.writes(mark)]
    if "json" in argv and not case.usage:  # -o json: stdout is one error document
        doc = json.loads(res.stdout)["error"]
        assert doc["exitCode"] == case.code and case.says in doc["message"], doc
    elif argv[0] == "status" and case.code == 3:  # an unreadable state: the live verdict,
        assert "verdict" in res.stdout, res.stdout  # which needs none, before its error
    else:
        assert res.stdout == "", "a refused command printed a document"
    assert "Traceback" not in res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    if case.usage:  # click: a usage line, where to get help, the one-sentence error, a fix
        assert lines[-2].startswith("Error: ") and case.says in lines[-2], lines
        assert lines[-1].startswith("fix: ") and len(lines[-1]) > len("fix: ") + 10, lines
        assert any(line.startswith("Try '") and "--help" in line for line in lines), lines
        return
    assert len(lines) == 2, lines
    error, fix = lines
    assert error.startswith("error: ") and case.says in error, error
    assert error.rstrip().endswith("."), error
    assert fix.startswith("fix: ") and len(fix) > len("fix: ") + 10, fix


def test_the_matrix_is_big_enough() -> None:
    assert len(CASES) >= 20
    assert {c.code for c in CASES} == {2, 3, 4}
