"""Kubeconfig discovery (--kubeconfig > $KUBECONFIG > ~/.kube/config > in-cluster) and its
one-sentence UsageErrors, which name the file or context and never quote credentials."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from migrator.errors import UsageError, exit_code_for
from migrator.kube import Kube
from migrator.kube.config import resolve_source

SECRET = "kubeconfig-secret-token-123"


def write_kubeconfig(path: Path, server: str = "http://127.0.0.1:1",
                     contexts: tuple[str, ...] = ("sim",), current: str | None = "sim") -> Path:
    doc: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": SECRET}}],
        "contexts": [{"name": n, "context": {"cluster": "c", "user": "u"}} for n in contexts],
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def usage_error(**kw: Any) -> UsageError:
    with pytest.raises(UsageError) as info:
        Kube.connect(**kw)
    assert exit_code_for(info.value) == 2
    assert SECRET not in info.value.message and SECRET not in info.value.hint
    return info.value


def test_explicit_kubeconfig_connects_without_leaking_the_token(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", server="http://127.0.0.1:6443")
    kube = Kube.connect(str(path))
    assert kube.server == "http://127.0.0.1:6443"
    assert SECRET not in repr(kube) and SECRET not in str(vars(kube))


def test_missing_explicit_file_is_named(tmp_path: Path) -> None:
    err = usage_error(kubeconfig=str(tmp_path / "nope"))
    assert str(tmp_path / "nope") in err.message and "--kubeconfig" in err.hint


def test_invalid_yaml_names_file_and_line_but_not_the_content(tmp_path: Path) -> None:
    path = tmp_path / "kc"
    path.write_text(f"users:\n- name: u\n  user: {{token: {SECRET}\n  bad: [\n")
    err = usage_error(kubeconfig=str(path))
    assert str(path) in err.message and "not valid YAML (line" in err.message
    assert err.__cause__ is None and err.__suppress_context__


def test_unknown_context_lists_the_known_ones(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", contexts=("prod", "staging"), current="prod")
    err = usage_error(kubeconfig=str(path), context="dev")
    assert "'dev'" in err.message and str(path) in err.message
    assert "prod, staging" in err.hint


def test_no_current_context_asks_for_one(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", current=None)
    err = usage_error(kubeconfig=str(path))
    assert "no current-context" in err.message and "--context" in err.hint
    assert Kube.connect(str(path), "sim").server == "http://127.0.0.1:1"


def test_a_context_whose_user_is_missing_is_a_usage_error(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc")
    doc = yaml.safe_load(path.read_text())
    doc["contexts"][0]["context"]["user"] = "ghost"
    doc["contexts"][0]["context"]["cluster"] = "ghost"
    path.write_text(yaml.safe_dump(doc))
    err = usage_error(kubeconfig=str(path))
    assert "invalid for context 'sim'" in err.message


def test_kubeconfig_env_then_home_then_in_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = write_kubeconfig(tmp_path / "a", server="http://127.0.0.1:1001")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{first}")
    assert Kube.connect().server == "http://127.0.0.1:1001"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert "KUBECONFIG" in usage_error().message
    monkeypatch.delenv("KUBECONFIG")
    home = tmp_path / "home" / ".kube"
    home.mkdir(parents=True)
    write_kubeconfig(home / "config", server="http://127.0.0.1:1002")
    assert Kube.connect().server == "http://127.0.0.1:1002"
    (home / "config").unlink()
    assert "No kubeconfig found" in usage_error().message
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert resolve_source(None).in_cluster
    assert "in-cluster service account" in usage_error().message  # no token file here
