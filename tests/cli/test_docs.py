"""The docs stay true to the code: links resolve, the README's exit-code table matches
migrator.errors, the runbook covers every gate the code can fail, the architecture covers
every import-linter contract, and docs/job.yaml runs a real command as its ServiceAccount."""

from __future__ import annotations

import configparser
import re
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from migrator import errors
from migrator.cli.app import app

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(doc: Path) -> None:
    text = doc.read_text()
    anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        if path:
            if path == "docs/rbac.yaml" or path == "rbac.yaml":
                continue  # its presence is test_rbac_binds_the_job_service_account's job
            assert (doc.parent / path).exists(), f"{doc.name}: broken link {target}"
        elif anchor:
            assert anchor in anchors, f"{doc.name}: no heading for #{anchor}"


def _anchor(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_exit_code_table_matches_the_code() -> None:
    rows = dict(re.findall(r"^\| (\d) \| (.+) \|$", (REPO / "README.md").read_text(), re.M))
    assert set(rows) == {"0", "1", "2", "3", "4"}
    samples = {1: errors.GateFailed("x"), 2: errors.UsageError("x"), 3: errors.APIError("x"),
               4: errors.LockHeld("x")}
    for code, error in samples.items():
        assert errors.exit_code_for(error) == code
    assert errors.exit_code_for(errors.StalePlan("x")) == 4 and "stale" in rows["4"]
    assert "gate" in rows["1"] and "bad input" in rows["2"] and "API" in rows["3"]


def _gate_names() -> set[str]:
    """Every gate name prefix the code can report (`<gate>/<object>`)."""
    names = set()
    for path in [*(REPO / "migrator").rglob("*.py"), *(REPO / "phases").glob("*.py")]:
        if "sim" in path.parts:
            continue
        src = path.read_text()
        names |= set(re.findall(r"GateResult\(\s*f?\"([a-z][a-z-]+)/", src))
        names |= set(re.findall(r"name = f\"([a-z][a-z-]+)/", src))
        names |= set(re.findall(r"gate(?:: str)? ?= ?\"([a-z][a-z-]+)\"", src))
        names |= set(re.findall(r"name: str = \"(no-[a-z-]+)\"", src))
    return names


def test_the_runbook_explains_every_gate() -> None:
    names = _gate_names()
    assert {"rollout-complete", "mixed-rollout", "selector-superset", "endpoints",
            "no-duplicate-scrape", "alias-name-free", "pods-labelled"} <= names
    runbook = (REPO / "docs" / "runbook.md").read_text()
    missing = sorted(n for n in names if f"`{n}" not in runbook)
    assert not missing, f"gates the runbook does not explain: {missing}"


def test_the_architecture_lists_every_import_contract() -> None:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    contracts = [s for s in config.sections() if s.startswith("importlinter:contract:")]
    text = (REPO / "docs" / "architecture.md").read_text()
    for section in contracts:
        assert f"**{section.rsplit(':', 1)[1]}**" in text, section
    for layer in config["importlinter:contract:layers"]["layers"].split():
        assert f"`{layer}`" in text, layer


def _job_docs() -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((REPO / "docs" / "job.yaml").read_text()) if d]
    return {d["kind"]: d for d in docs}


def test_job_runs_as_its_service_account_with_exit_code_aware_retries() -> None:
    docs = _job_docs()
    assert set(docs) == {"ServiceAccount", "Job", "CronJob"}
    account = docs["ServiceAccount"]["metadata"]
    job = docs["Job"]["spec"]
    pod = job["template"]["spec"]
    assert pod["serviceAccountName"] == account["name"]
    assert docs["Job"]["metadata"]["namespace"] == account["namespace"] == "gpu-operator"
    assert pod["restartPolicy"] == "Never"  # required by podFailurePolicy
    fail_now = next(r for r in job["podFailurePolicy"]["rules"] if r["action"] == "FailJob")
    assert fail_now["onExitCodes"]["values"] == [1, 2]  # gate stopped / bad input: a human looks
    assert fail_now["onExitCodes"]["containerName"] == pod["containers"][0]["name"]
    cron_pod = docs["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert cron_pod["serviceAccountName"] == account["name"]


@pytest.mark.parametrize("kind", ["Job", "CronJob"])
def test_job_arguments_are_a_valid_command_line(kind: str) -> None:
    spec = _job_docs()[kind]["spec"]
    pod = spec["template"]["spec"] if kind == "Job" else spec["jobTemplate"]["spec"][
        "template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["dcgm-migrate"]
    assert not any(a.startswith("--kubeconfig") for a in container["args"])  # in-cluster config
    group = typer.main.get_group(app)
    name, *rest = container["args"]
    command = group.commands[name]
    ctx = command.make_context(name, list(rest))  # raises on an unknown option or bad value
    assert ctx.params["namespace"] == "gpu-operator"


def test_rbac_binds_the_job_service_account() -> None:
    rbac = REPO / "docs" / "rbac.yaml"  # shipped: a missing file is a failure
    account = _job_docs()["ServiceAccount"]["metadata"]
    subjects = [s for d in yaml.safe_load_all(rbac.read_text()) if d and d.get("kind") in (
        "RoleBinding", "ClusterRoleBinding") for s in d.get("subjects") or []]
    assert {"kind": "ServiceAccount", "name": account["name"],
            "namespace": account["namespace"]} in [
        {k: s.get(k) for k in ("kind", "name", "namespace")} for s in subjects], (
        "docs/rbac.yaml must bind ServiceAccount gpu-operator/dcgm-migrate (docs/job.yaml)")
