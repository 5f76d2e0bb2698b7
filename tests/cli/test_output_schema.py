"""docs/output.schema.json: a valid JSON Schema that every command's `-o json` (and `-o yaml`)
document matches, and that rejects documents breaking the `-o json` contract (docs/design.md,
"Command line")."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from dcgm_sim.cluster import SimCluster
from tests.helpers import cli

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "output.schema.json"
COMMANDS = ("plan", "apply", "rollback", "status", "verify", "preflight", "unlock")


def test_the_schema_is_valid_and_defines_every_command() -> None:
    schema = json.loads(SCHEMA.read_text())
    Draft202012Validator.check_schema(schema)
    assert set(COMMANDS) <= set(schema["$defs"])


@pytest.fixture(scope="module")
def documents() -> dict[str, Any]:
    """One real document per command, from a whole migration and rollback on a sim."""
    docs: dict[str, Any] = {}
    with SimCluster(nodes=2, stack="gpucluster", time_scale=0.005) as sim:
        def run(*args: str, code: int = 0) -> Any:
            res = cli.run(sim.kubeconfig, *args, "-o", "json")
            assert res.code == code, res.stderr
            return res.json()  # validated against the schema by the helper

        docs["preflight"] = run("preflight")
        docs["plan"] = run("plan")
        docs["apply"] = run("apply", "--phase", "3", "--yes")
        docs["status"] = run("status")
        docs["verify"] = run("verify")
        docs["unlock"] = run("unlock")
        docs["rollback"] = run("rollback", "--phase", "1", "--yes", "--settle", "0s")
        res = cli.run(sim.kubeconfig, "status", "-o", "yaml")
        docs["status-yaml"] = yaml.safe_load(res.stdout)
    return docs


@pytest.mark.parametrize("command", COMMANDS)
def test_real_documents_match_their_definition(documents: dict[str, Any], command: str) -> None:
    cli.validate(command, documents[command])


def test_yaml_output_is_the_same_document(documents: dict[str, Any]) -> None:
    cli.validate("status", documents["status-yaml"])
    assert documents["status-yaml"]["phases"][0]["status"] == "rolled-back"


def test_apply_reports_lowest_endpoints_per_guarded_service(documents: dict[str, Any]) -> None:
    result = documents["apply"]["result"]
    # 6 object writes, phase 1's hold and restore of both DaemonSets, a patch per pod (2x2)
    assert result["writes"] == 6 + 2 * 2 + 4 and result["dryRun"] is False
    assert set(result["lowestEndpoints"]) == {"nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra",
                                              "nvidia-dcgm", "nvidia-dcgm-exporter"}


def _broken(doc: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    change(out)
    return out


@pytest.mark.parametrize("command, change, where", [
    ("plan", lambda d: d.pop("phases"), "(root)"),
    ("plan", lambda d: d["phases"][0].update(status="done"), "phases/0/status"),
    ("plan", lambda d: d["phases"][1]["gates"].append({"name": "x", "ok": "yes",
                                                       "detail": ""}), "phases/1/gates"),
    ("plan", lambda d: d.update(result={"writes": 1}), "(root)"),  # plan never writes
    ("status", lambda d: d.pop("ok"), "(root)"),
    ("apply", lambda d: d["result"]["lowestEndpoints"].update(x={"lowest": -1, "baseline": 2}),
     "result/lowestEndpoints/x/lowest"),
    ("preflight", lambda d: d["checks"][0].pop("detail"), "checks/0"),
])
def test_the_schema_rejects_broken_documents(documents: dict[str, Any], command: str,
                                             change: Callable[[dict[str, Any]], None],
                                             where: str) -> None:
    with pytest.raises(AssertionError) as failed:
        cli.validate(command, _broken(documents[command], change))
    assert f"at {where}" in str(failed.value)
