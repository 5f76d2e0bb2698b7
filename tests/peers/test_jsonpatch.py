"""The JSON Patch peer suite as judge of the sim's JSON patch (dcgm_sim/patching.py): every
case of json-patch/json-patch-tests (tests.json, spec_tests.json; jsonpatch_suite.json names
the commit) passes, except the ones kube-apiserver answers otherwise because it applies
patches with evanphx/json-patch v4: those are listed with the reason in jsonpatch_kube.json and
must give kube-apiserver's answer instead, as must that file's own cases (read from
evanphx/json-patch v4.12.0 patch.go). One request through the official client shows the
server doing the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from dcgm_sim.patching import PatchError, json_patch
from dcgm_sim.server import ApiServer
from tests.sim.conftest import NS, make_client

HERE = Path(__file__).parent
SUITE = json.loads((HERE / "jsonpatch_suite.json").read_text())
KUBE = json.loads((HERE / "jsonpatch_kube.json").read_text())
Case = dict[str, Any]


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON documents, types included (1 is not 1.0 nor true)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def verdict(case: Case, *, any_error: bool = False) -> str:
    """"" when the sim gives the case's answer, else what it gave instead. An expected error
    is matched by its text, unless `any_error` (the suite's texts are prose, not messages)."""
    try:
        out = json_patch(case["doc"], case["patch"])
    except PatchError as error:
        if "error" in case:
            if any_error or str(case["error"]).lower() in str(error).lower():
                return ""
            return f"error {error!r}, expected {case['error']!r}"
        return f"error {error!r}"
    if "error" in case:
        return f"no error ({json.dumps(out)}), expected {case['error']!r}"
    wanted = case.get("expected", case["doc"])  # no `expected`: only that it applies
    if "expected" not in case or _same(out, wanted):
        return ""
    return f"{json.dumps(out)}, expected {json.dumps(wanted)}"


@pytest.mark.parametrize("name", ["tests.json", "spec_tests.json"])
def test_json_patch_tests_suite(name: str, request: pytest.FixtureRequest) -> None:
    unsupported = {u["index"]: u for u in KUBE["unsupported"] if u["file"] == name}
    run = passed = 0
    failures = []
    for index, case in enumerate(SUITE[name]):
        if case.get("disabled"):
            continue  # disabled by the suite's authors
        run += 1
        if index in unsupported:
            kube = {**case, **unsupported[index]["kube"]}
            kube.pop("expected" if "error" in unsupported[index]["kube"] else "error", None)
            problem = verdict(kube)
            if problem:
                failures.append(f"{name}[{index}] unsupported, but not as kube-apiserver: "
                                f"{problem}")
            continue
        problem = verdict(case, any_error=True)
        if problem:
            failures.append(f"{name}[{index}] {case.get('comment', '')}: {problem}")
        else:
            passed += 1
    request.node.user_properties.append((
        "peer-suite", f"json-patch-tests {name}: {run} cases run, {passed} pass, "
                      f"{len(unsupported)} unsupported"))
    assert failures == []
    assert run == passed + len(unsupported)


def test_kube_apiserver_json_patch_cases(request: pytest.FixtureRequest) -> None:
    cases = KUBE["cases"]
    failures = [f"{case['comment']}: {problem}" for case in cases
                if (problem := verdict(case))]
    request.node.user_properties.append((
        "peer-suite", f"evanphx/json-patch v4.12.0 (kube-apiserver) cases: {len(cases)} cases "
                      f"run, {len(cases) - len(failures)} pass, 0 unsupported"))
    assert failures == []


def test_the_unsupported_list_names_real_cases() -> None:
    for entry in KUBE["unsupported"]:
        case = SUITE[entry["file"]][entry["index"]]
        assert not case.get("disabled") and entry["reason"].startswith(
            "kube-apiserver (evanphx/json-patch v4) ")


def test_replace_of_a_missing_key_through_the_api(empty_api: ApiServer) -> None:
    """kube-apiserver answers a `replace` of a missing member as an add (evanphx v4), where
    RFC 6902 says 422: the sim does the same over HTTP."""
    core = client.CoreV1Api(make_client(empty_api.url))
    core.create_namespaced_config_map(NS, cast(client.V1ConfigMap, {
        "metadata": {"name": "c"}, "data": {"a": "1"}}))
    patched = core.patch_namespaced_config_map(
        "c", NS, [{"op": "replace", "path": "/data/b", "value": "2"}])
    assert patched.data == {"a": "1", "b": "2"}
