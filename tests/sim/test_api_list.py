"""Simulated API server: list with label selectors (equality and set-based), field selectors,
pagination (limit/continue) and cluster-wide lists, through the official client."""

from __future__ import annotations

import json
from typing import Protocol, cast

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dcgm_sim import writes
from dcgm_sim.store import Store
from migrator.model import kinds
from tests.sim.conftest import NS, Raw, pod


@pytest.fixture
def pods(store: Store) -> Store:
    """Six pods: app a/b, tier set on some, spread over two nodes and two namespaces."""
    specs = [("a-1", "node-1", {"app": "a", "tier": "x"}), ("a-2", "node-2", {"app": "a"}),
             ("b-1", "node-1", {"app": "b", "tier": "y"}), ("b-2", "node-2", {"app": "b"})]
    for name, node, labels in specs:
        writes.create(store, kinds.POD, pod(name, node=node, labels=labels), namespace=NS)
    for name in ("d-1", "d-2"):
        writes.create(store, kinds.POD, pod(name, labels={"app": "a"}, ns="default"),
                      namespace="default")
    return store


class _Stored(Protocol):
    @property
    def metadata(self) -> client.V1ObjectMeta | None: ...


def _name(obj: _Stored) -> str:
    """The name of an object the server listed, which always carries one."""
    assert obj.metadata is not None and obj.metadata.name is not None
    return obj.metadata.name


def _names(pod_list: client.V1PodList) -> list[str]:
    return [_name(p) for p in pod_list.items]


def _list_meta(page: client.V1PodList | client.V1ConfigMapList) -> client.V1ListMeta:
    """A list's metadata, which the server always sends."""
    assert page.metadata is not None
    return page.metadata


@pytest.mark.parametrize(("selector", "expected"), [
    ("app=a", ["a-1", "a-2"]),
    ("app==a", ["a-1", "a-2"]),
    ("app!=a", ["b-1", "b-2"]),
    ("app in (a,b),tier", ["a-1", "b-1"]),
    ("tier notin (x)", ["a-2", "b-1", "b-2"]),
    ("!tier", ["a-2", "b-2"]),
    ("app=b,tier=y", ["b-1"]),
    ("", ["a-1", "a-2", "b-1", "b-2"]),
])
def test_label_selectors(pods: Store, core: client.CoreV1Api, selector: str,
                         expected: list[str]) -> None:
    assert _names(core.list_namespaced_pod(NS, label_selector=selector)) == expected


def test_malformed_label_selector_is_400(pods: Store, core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(NS, label_selector="app in (a")
    assert err.value.status == 400 and err.value.body is not None
    assert json.loads(err.value.body)["reason"] == "BadRequest"


@pytest.mark.parametrize(("selector", "expected"), [
    ("metadata.name=a-2", ["a-2"]),
    ("spec.nodeName=node-1", ["a-1", "b-1"]),
    ("spec.nodeName==node-2,metadata.name!=a-2", ["b-2"]),
    ("metadata.namespace=gpu-operator", ["a-1", "a-2", "b-1", "b-2"]),
])
def test_field_selectors(pods: Store, core: client.CoreV1Api, selector: str,
                         expected: list[str]) -> None:
    assert _names(core.list_namespaced_pod(NS, field_selector=selector)) == expected


def test_unsupported_field_selector_is_400(pods: Store, core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(NS, field_selector="spec.hostname=x")
    assert err.value.status == 400 and err.value.body is not None
    assert json.loads(err.value.body)["message"] == "field label not supported: spec.hostname"
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map(NS, field_selector="spec.nodeName=x")
    assert err.value.status == 400


def test_cluster_wide_list_and_list_metadata(pods: Store, core: client.CoreV1Api,
                                            raw: Raw) -> None:
    everything = core.list_pod_for_all_namespaces()
    assert _names(everything) == ["d-1", "d-2", "a-1", "a-2", "b-1", "b-2"]
    code, body, _ = raw("GET", "/api/v1/pods")
    assert code == 200
    assert body["kind"] == "PodList" and body["apiVersion"] == "v1"
    assert body["metadata"]["resourceVersion"] == str(pods.resource_version)
    assert "continue" not in body["metadata"]


def test_pagination_returns_every_item_exactly_once(store: Store,
                                                    core: client.CoreV1Api) -> None:
    for i in range(23):
        writes.create(store, kinds.CONFIGMAP, {"metadata": {"name": f"cm-{i:02d}"}},
                      namespace=NS)
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = core.list_namespaced_config_map(NS, limit=5, _continue=token)
        pages += 1
        seen += [_name(i) for i in page.items]
        token = _list_meta(page)._continue
        if not token:
            assert _list_meta(page).remaining_item_count is None
            break
        assert _list_meta(page).remaining_item_count == 23 - len(seen)
    assert pages == 5
    assert seen == [f"cm-{i:02d}" for i in range(23)]


def test_pagination_with_a_selector_has_no_remaining_count(pods: Store,
                                                          core: client.CoreV1Api) -> None:
    first = core.list_namespaced_pod(NS, label_selector="app=a", limit=1)
    assert _names(first) == ["a-1"]
    assert _list_meta(first)._continue
    assert _list_meta(first).remaining_item_count is None
    second = core.list_namespaced_pod(NS, label_selector="app=a", limit=1,
                                      _continue=_list_meta(first)._continue)
    assert _names(second) == ["a-2"]
    assert _list_meta(second).resource_version == _list_meta(first).resource_version


def test_pagination_survives_deletion_between_pages(store: Store,
                                                    core: client.CoreV1Api) -> None:
    for i in range(6):
        writes.create(store, kinds.CONFIGMAP, {"metadata": {"name": f"cm-{i}"}}, namespace=NS)
    first = core.list_namespaced_config_map(NS, limit=3)
    writes.delete(store, kinds.CONFIGMAP, namespace=NS, name="cm-1")
    writes.delete(store, kinds.CONFIGMAP, namespace=NS, name="cm-4")
    rest = core.list_namespaced_config_map(NS, limit=10,
                                           _continue=_list_meta(first)._continue)
    assert [_name(i) for i in rest.items] == ["cm-3", "cm-5"]


def test_bad_continue_token_is_400(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map(NS, limit=1, _continue="not-a-token")
    assert err.value.status == 400


def test_preloadless_list_is_plain_json(pods: Store, core: client.CoreV1Api) -> None:
    # unpreloaded, the client answers with the HTTP response itself, whatever its annotation says
    resp = cast(urllib3.HTTPResponse,
                core.list_namespaced_pod(NS, limit=2, _preload_content=False))
    body = json.loads(resp.data)
    assert [i["metadata"]["name"] for i in body["items"]] == ["a-1", "a-2"]
    assert resp.headers["Content-Type"] == "application/json"
