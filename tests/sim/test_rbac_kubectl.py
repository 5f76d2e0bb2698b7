"""RBAC through real kubectl (docs/architecture.md, "The simulated cluster"): docs/rbac.yaml loaded
into the sim, kubectl running as its ServiceAccount (a kubeconfig with that identity's token, over
the sim's https listener: kubectl sends tokens only over https), `kubectl auth can-i` for every
permission the tool needs (yes) and some it must not have (no), the same through `--as`
impersonation, and a forbidden `kubectl get` printing the real server's Forbidden sentence; and
on a sim started without --rbac, `kubectl apply` / `kubectl delete` of docs/guard.yaml's RBAC
deciding `kubectl auth can-i --as` its ServiceAccount at once."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from dcgm_sim.access import ADMIN_TOKEN, ADMIN_USER
from dcgm_sim.cluster import SimCluster
from dcgm_sim.serve import ServeError, ServeOptions, serve
from migrator.engine.permissions import REQUIRED, Permission
from migrator.model import kinds
from tests.helpers import cli

if TYPE_CHECKING:
    from migrator.model.kinds import Kind

REPO = Path(__file__).resolve().parents[2]
NS = "gpu-operator"
SA = "system:serviceaccount:gpu-operator:dcgm-migrate"

# What the tool must never be able to do with docs/rbac.yaml (least privilege).
MUST_NOT = [
    ("delete", "daemonsets.apps/nvidia-dcgm-dra"),
    ("create", "daemonsets.apps"),
    ("patch", "daemonsets.apps/someone-elses"),
    ("delete", "services/nvidia-dcgm-dra"),  # only the two aliases may be deleted
    ("patch", "services/kubernetes"),
    ("update", "configmaps/someone-elses"),
    ("list", "configmaps"),
    ("list", "namespaces"),
    ("patch", "clusterpolicies.nvidia.com/cluster-policy"),
    ("delete", "namespaces/gpu-operator"),
    ("impersonate", "users/sim-admin"),
]


@dataclass
class Kubectl:
    binary: str
    home: Path

    def __call__(self, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "HOME": str(self.home), "KUBECACHEDIR": str(self.home / "cache")}
        env.pop("KUBECONFIG", None)
        return subprocess.run([self.binary, "--kubeconfig", str(kubeconfig), *args], env=env,
                              capture_output=True, text=True, timeout=60, check=False)


@dataclass
class Cluster:
    sim: SimCluster
    sa: Path  # kubeconfig: the ServiceAccount's token, https
    admin: Path  # kubeconfig: the admin's token, https (for --as)
    kubectl: Kubectl


@pytest.fixture
def rbac_sim(make_sim: Callable[..., SimCluster], tmp_path: Path) -> Cluster:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not on PATH")
    sim = make_sim(nodes=1, stack="gpucluster", tls=True)
    assert sim.load_rbac((REPO / "docs" / "rbac.yaml").read_text()) == [SA]
    return Cluster(sim, sim.kubeconfig_for(SA), sim.kubeconfig_for(ADMIN_USER),
                   Kubectl(binary, tmp_path))


def _can_i_args(p: Permission) -> list[str]:
    target = p.kind.key + (f"/{p.name}" if p.name else "")
    scope = ["-n", NS] if p.namespaced else (["-A"] if p.kind.namespaced else [])
    return ["auth", "can-i", p.verb, target, *scope]


def _answers(c: Cluster, kubeconfig: Path, cases: list[list[str]],
             extra: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    out = []
    for args in cases:
        res = c.kubectl(kubeconfig, *args, *extra)
        out.append((" ".join(args[2:4]), res.stdout.strip()))
    return out


def test_the_service_account_can_do_everything_the_tool_needs(rbac_sim: Cluster) -> None:
    cases = [_can_i_args(p) for p in REQUIRED]
    answers = _answers(rbac_sim, rbac_sim.sa, cases)
    assert [a for a in answers if a[1] != "yes"] == []
    # ... and kubectl really ran as the ServiceAccount, with its token.
    reviews = [r for r in rbac_sim.sim.server.log.entries()
               if r.resource == "selfsubjectaccessreviews"]
    assert len(reviews) >= len(REQUIRED) and {r.user for r in reviews} == {SA}


def test_the_service_account_cannot_do_more(rbac_sim: Cluster) -> None:
    cases = [["auth", "can-i", verb, target, "-n", NS] for verb, target in MUST_NOT]
    assert _answers(rbac_sim, rbac_sim.sa, cases) == [(f"{v} {t}", "no") for v, t in MUST_NOT]


def test_admin_can_i_as_the_service_account_gives_the_same_answers(rbac_sim: Cluster) -> None:
    cases = ([_can_i_args(p) for p in REQUIRED]
             + [["auth", "can-i", v, t, "-n", NS] for v, t in MUST_NOT])
    wanted = ["yes"] * len(REQUIRED) + ["no"] * len(MUST_NOT)
    answers = _answers(rbac_sim, rbac_sim.admin, cases, ("--as", SA))
    assert [a for a, _ in answers] == [" ".join(c[2:4]) for c in cases]
    assert [ans for _, ans in answers] == wanted
    # Without --as the admin may do all of it (the impersonation, not the token, said no).
    assert rbac_sim.kubectl(rbac_sim.admin, "auth", "can-i", "list", "nodes").stdout.strip() \
        == "yes"


def test_a_forbidden_get_prints_the_servers_forbidden_sentence(rbac_sim: Cluster) -> None:
    res = rbac_sim.kubectl(rbac_sim.sa, "get", "namespaces")
    assert res.returncode == 1
    assert res.stderr.strip() == (
        f'Error from server (Forbidden): namespaces is forbidden: User "{SA}" cannot list '
        'resource "namespaces" in API group "" at the cluster scope')
    res = rbac_sim.kubectl(rbac_sim.sa, "delete", "service", "nvidia-dcgm-dra", "-n", NS)
    assert res.returncode == 1
    assert res.stderr.strip() == (
        'Error from server (Forbidden): services "nvidia-dcgm-dra" is forbidden: User '
        f'"{SA}" cannot delete resource "services" in API group "" in the namespace "{NS}"')
    assert rbac_sim.sim.store.find(*_svc("nvidia-dcgm-dra")) is not None
    # What it may do, it does.
    res = rbac_sim.kubectl(rbac_sim.sa, "get", "daemonsets", "-n", NS, "-o", "name")
    assert res.returncode == 0, res.stderr
    assert "daemonset.apps/nvidia-dcgm-dra" in res.stdout.split()


def test_impersonation_needs_the_impersonate_verb(rbac_sim: Cluster) -> None:
    res = rbac_sim.kubectl(rbac_sim.sa, "auth", "can-i", "get", "pods", "-n", NS,
                           "--as", "sim-admin")
    assert res.returncode == 1
    # (kubectl's discovery is refused too: it complains about it first, as on a real cluster)
    assert res.stderr.strip().splitlines()[-1] == (
        'Error from server (Forbidden): users "sim-admin" is forbidden: User '
        f'"{SA}" cannot impersonate resource "users" in API group "" at the cluster scope')


def test_impersonated_groups_count(rbac_sim: Cluster) -> None:
    """A user bound to nothing may do nothing, unless impersonated into system:masters."""
    ask = ("auth", "can-i", "list", "nodes")
    assert rbac_sim.kubectl(rbac_sim.admin, *ask, "--as", "bob").stdout.strip() == "no"
    assert rbac_sim.kubectl(rbac_sim.admin, *ask, "--as", "bob", "--as-group",
                            "system:masters").stdout.strip() == "yes"


def test_the_tool_runs_as_the_service_account_over_https(rbac_sim: Cluster) -> None:
    res = cli.run(str(rbac_sim.sa), "preflight", "-o", "json")
    assert res.code == 0, res.stdout + res.stderr
    checks = {c["name"]: c["ok"] for c in res.json()["checks"]}
    assert checks["rbac"] is True
    users = {r.user for r in rbac_sim.sim.server.log.entries()
             if r.resource == "selfsubjectaccessreviews"}
    assert users == {SA}


def _svc(name: str) -> tuple[Kind, str, str]:
    return kinds.SERVICE, NS, name


def test_impersonation_headers_over_raw_http(rbac_sim: Cluster) -> None:
    """What kubectl does not show: groups without a user are a 400, the request runs (and is
    logged) as the impersonated user, and an impersonated ServiceAccount gets its groups."""

    def get(path: str, **headers: str) -> int:
        req = urllib.request.Request(rbac_sim.sim.url + path, headers={
            "Authorization": f"Bearer {ADMIN_TOKEN}", **headers})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    assert get("/api/v1/nodes", **{"Impersonate-Group": "system:masters"}) == 400
    mark = rbac_sim.sim.server.log.last_seq
    assert get(f"/api/v1/namespaces/{NS}/pods", **{"Impersonate-User": SA}) == 200
    assert get("/api/v1/namespaces", **{"Impersonate-User": SA}) == 403
    assert [r.user for r in rbac_sim.sim.server.log.since(mark)] == [SA, SA]
    policy = rbac_sim.sim.server.access.policy_of(SA)
    assert set(policy.groups) == {"system:authenticated", "system:serviceaccounts",
                                  "system:serviceaccounts:gpu-operator"}


def test_sim_serve_rbac_writes_a_kubeconfig_per_identity(tmp_path: Path) -> None:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not on PATH")
    with pytest.raises(ServeError, match="--rbac needs the TLS listener"):
        serve(ServeOptions(nodes=1, rbac=(REPO / "docs" / "rbac.yaml",), tls=False))
    out, err, stop = io.StringIO(), io.StringIO(), threading.Event()
    options = ServeOptions(nodes=1, time_scale=0.02, kubeconfig_out=tmp_path / "kc",
                           rbac=(REPO / "docs" / "rbac.yaml",))
    worker = threading.Thread(target=serve, args=(options,),
                              kwargs={"out": out, "err": err, "stop": stop})
    worker.start()
    try:
        for _ in range(300):
            if out.getvalue():
                break
            time.sleep(0.05)
        assert out.getvalue().startswith("READY http://")
        sa = tmp_path / "kc-gpu-operator-dcgm-migrate"
        admin = tmp_path / "kc-sim-admin"
        assert f"kubeconfig for {SA} (https, token): {sa}" in err.getvalue()
        assert f"kubeconfig for sim-admin (https, token): {admin}" in err.getvalue()
        kubectl = Kubectl(binary, tmp_path)
        assert kubectl(sa, "auth", "can-i", "patch", "services/nvidia-dcgm").stdout.strip() \
            == "yes"
        assert kubectl(sa, "auth", "can-i", "patch", "services/other").stdout.strip() == "no"
        assert kubectl(admin, "auth", "can-i", "list", "namespaces", "--as", SA
                       ).stdout.strip() == "no"
    finally:
        stop.set()
        worker.join(30)


def _sar(tmp: Path, verb: str, resource: str, name: str = "", user: str = SA,
         groups: tuple[str, ...] = ("system:serviceaccounts", "system:authenticated")) -> Path:
    attrs = {"verb": verb, "resource": resource, "namespace": NS}
    if name:
        attrs["name"] = name
    path = tmp / f"sar-{verb}-{resource}-{name}.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": list(groups), "resourceAttributes": attrs}}))
    return path


def test_subject_access_review_through_kubectl(rbac_sim: Cluster, tmp_path: Path) -> None:
    """`kubectl create -f` of a SubjectAccessReview (the API a webhook or an admin uses to ask
    about another user): the admin may, the ServiceAccount may not (it lacks `create
    subjectaccessreviews`), and the answer follows docs/rbac.yaml."""
    def allowed(kubeconfig: Path, review: Path) -> subprocess.CompletedProcess[str]:
        return rbac_sim.kubectl(kubeconfig, "create", "-f", str(review), "--validate=false",
                                "-o", "jsonpath={.status.allowed}")

    assert allowed(rbac_sim.admin, _sar(tmp_path, "patch", "services", "nvidia-dcgm")).stdout \
        == "true"
    assert allowed(rbac_sim.admin, _sar(tmp_path, "patch", "services", "other")).stdout \
        == "false"
    assert allowed(rbac_sim.admin, _sar(tmp_path, "list", "nodes", user="bob",
                                        groups=("system:masters",))).stdout == "true"
    refused = allowed(rbac_sim.sa, _sar(tmp_path, "patch", "services", "nvidia-dcgm"))
    assert refused.returncode == 1
    assert refused.stderr.strip().endswith(
        f'subjectaccessreviews.authorization.k8s.io is forbidden: User "{SA}" cannot create '
        'resource "subjectaccessreviews" in API group "authorization.k8s.io" at the cluster '
        "scope")
    empty = _sar(tmp_path, "get", "pods", user="", groups=())
    res = allowed(rbac_sim.admin, empty)
    assert res.returncode == 1
    assert 'spec.user: Invalid value: "": at least one of user or group must be specified' \
        in res.stderr


GUARD_SA = f"system:serviceaccount:{NS}:dcgm-migrate-guard"


def _guard_needs() -> list[tuple[str, ...]]:
    """(verb, resource[.group][/name][, --subresource=...]) for every verb of every rule of
    docs/guard.yaml's Role: what the guard asks the API server for (`endpointslices/restricted`
    is what OpenShift's admission asks about its slice writes)."""
    role = next(d for d in yaml.safe_load_all((REPO / "docs" / "guard.yaml").read_text())
                if d and d.get("kind") == "Role")
    out = []
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                resource, _, sub = resource.partition("/")
                target = f"{resource}.{group}" if group else resource
                flags = (f"--subresource={sub}",) if sub else ()
                for name in rule.get("resourceNames") or [""]:
                    for verb in rule["verbs"]:
                        out.append((verb, f"{target}/{name}" if name else target, *flags))
    return out


def test_kubectl_apply_of_the_guards_rbac_on_a_running_sim(tmp_path: Path) -> None:
    """What a user does: `sim serve` without --rbac, `kubectl apply -f docs/rbac.yaml -f
    docs/guard.yaml`; `kubectl auth can-i --as` the guard's ServiceAccount says yes for all it
    needs; `kubectl delete` of its RoleBinding says no again, and a re-apply yes."""

    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not on PATH")
    out, err, stop = io.StringIO(), io.StringIO(), threading.Event()
    options = ServeOptions(nodes=1, time_scale=0.02, kubeconfig_out=tmp_path / "kc")
    worker = threading.Thread(target=serve, args=(options,),
                              kwargs={"out": out, "err": err, "stop": stop})
    worker.start()
    try:
        for _ in range(300):
            if out.getvalue():
                break
            time.sleep(0.05)
        assert out.getvalue().startswith("READY http://"), err.getvalue()
        admin = tmp_path / "kc-sim-admin"
        kubectl = Kubectl(binary, tmp_path)
        needs = _guard_needs()
        assert ("patch", "services/nvidia-dcgm") in needs and len(needs) > 10
        assert ("create", "endpointslices.discovery.k8s.io", "--subresource=restricted") in needs

        def answers(*extra: str) -> list[str]:
            return [kubectl(admin, "auth", "can-i", *need, "-n", NS, "--as", GUARD_SA,
                            *extra).stdout.strip() for need in needs]

        assert set(answers()) == {"no"}
        applied = kubectl(admin, "apply", "-f", str(REPO / "docs" / "rbac.yaml"),
                          "-f", str(REPO / "docs" / "guard.yaml"))
        assert applied.returncode == 0, applied.stderr
        assert answers() == ["yes"] * len(needs)
        # least privilege still holds: nothing beyond the Role
        for verb, target in (("delete", "services/nvidia-dcgm"), ("patch", "services/other"),
                             ("list", "nodes"), ("update", "configmaps/dcgm-migrate-state")):
            assert kubectl(admin, "auth", "can-i", verb, target, "-n", NS, "--as", GUARD_SA
                           ).stdout.strip() == "no", (verb, target)
        deleted = kubectl(admin, "delete", "rolebinding", "dcgm-migrate-guard", "-n", NS)
        assert deleted.returncode == 0, deleted.stderr
        assert set(answers()) == {"no"}
        again = kubectl(admin, "apply", "-f", str(REPO / "docs" / "guard.yaml"))
        assert again.returncode == 0, again.stderr
        assert answers() == ["yes"] * len(needs)
    finally:
        stop.set()
        worker.join(30)
