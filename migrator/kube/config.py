"""Where the client's connection settings come from: kubeconfig or the pod's service account.

The search order is kubectl's: an explicit `--kubeconfig`, then `$KUBECONFIG` (a list of files,
merged), then `~/.kube/config`, then the in-cluster service account. Every way this can fail is a
`UsageError` (exit 2) naming the file or context and the fix. Messages never quote the file's
contents: a kubeconfig holds tokens and keys.

A kubeconfig with static credentials becomes an `endpoint.Endpoint` without the kubernetes
client; anything else is read by the client's own loader, imported only then (it costs more
than a whole short command).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from migrator.errors import UsageError
from migrator.kube.endpoint import Endpoint, from_kubeconfig
from migrator.model import yamldoc

_HINT = "pass a working file with --kubeconfig (or set KUBECONFIG) and a valid --context"


@dataclass(frozen=True)
class Source:
    """Where the settings were read from, for messages: file paths, or the service account."""

    paths: tuple[str, ...]
    in_cluster: bool = False

    def describe(self) -> str:
        return "the in-cluster service account" if self.in_cluster else ", ".join(self.paths)


def resolve_source(kubeconfig: str | None, env: dict[str, str] | None = None) -> Source:
    """Which kubeconfig files to read (or in-cluster), in kubectl's order of precedence."""
    environ = dict(os.environ) if env is None else env
    if kubeconfig:
        path = os.path.expanduser(kubeconfig)
        if not os.path.isfile(path):
            raise UsageError(
                f"The kubeconfig file {kubeconfig} does not exist or is not a file.",
                "pass the path of an existing kubeconfig with --kubeconfig",
            )
        return Source((path,))
    listed = environ.get("KUBECONFIG", "")
    if listed:
        paths = tuple(os.path.expanduser(p) for p in listed.split(os.pathsep) if p)
        present = tuple(p for p in paths if os.path.isfile(p))
        if not present:
            raise UsageError(
                f"None of the files in KUBECONFIG ({listed}) exists.",
                "fix or unset KUBECONFIG, or pass --kubeconfig",
            )
        return Source(present)
    home = Path(environ.get("HOME") or os.path.expanduser("~")) / ".kube" / "config"
    if home.is_file():
        return Source((str(home),))
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return Source((), in_cluster=True)
    raise UsageError(
        f"No kubeconfig found: {home} does not exist, KUBECONFIG is not set and this is not "
        "running inside a cluster.",
        _HINT,
    )


def _read_yaml(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = yamldoc.safe_load(fh)
    except OSError as exc:
        raise UsageError(
            f"Cannot read the kubeconfig file {path}: {exc.strerror or exc}.", _HINT
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        # `from None`: the YAML error quotes the offending line, which may hold a token.
        raise UsageError(f"The kubeconfig file {path} is not valid YAML{where}.", _HINT) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"The kubeconfig file {path} is not a kubeconfig (not a mapping).", _HINT)
    return data


def check_context(source: Source, context: str | None) -> str:
    """The context that will be used; UsageError when it is unknown or none is set."""
    names: list[str] = []
    current = ""
    for path in source.paths:
        data = _read_yaml(path)
        for entry in data.get("contexts") or []:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                names.append(entry["name"])
        if not current and isinstance(data.get("current-context"), str):
            current = data["current-context"]
    wanted = context or current
    where = source.describe()
    if not names:
        raise UsageError(f"The kubeconfig {where} defines no contexts.", _HINT)
    if not wanted:
        raise UsageError(
            f"The kubeconfig {where} has no current-context and no --context was given.",
            f"pass --context (one of: {', '.join(names)})",
        )
    if wanted not in names:
        raise UsageError(
            f"Context {wanted!r} is not defined in the kubeconfig {where}.",
            f"pass --context with one of: {', '.join(names)}",
        )
    return wanted


def load_configuration(
    kubeconfig: str | None = None, context: str | None = None
) -> tuple[Endpoint | Any, Source]:
    """The connection for the chosen kubeconfig/context (or the service account): an
    `Endpoint` when its credentials are static, else a client Configuration."""
    source = resolve_source(kubeconfig)
    if not source.in_cluster:
        chosen = check_context(source, context)
        endpoint = from_kubeconfig(source.paths, _read_yaml(source.paths[0]), chosen)
        if endpoint is not None:
            return endpoint, source
    return _client_configuration(source, context), source


def _client_configuration(source: Source, context: str | None) -> Any:
    """The kubernetes client's loader, for what `endpoint` does not read."""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException

    cfg = k8s_client.Configuration()
    if source.in_cluster:
        if context:
            raise UsageError(
                f"--context {context} was given but no kubeconfig exists (running in-cluster).",
                _HINT,
            )
        try:
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=cfg
            )
        except ConfigException as exc:
            raise UsageError(
                f"Cannot use the in-cluster service account: {exc}.", _HINT
            ) from None
        return cfg
    chosen = check_context(source, context)
    try:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=os.pathsep.join(source.paths),
            context=chosen,
            client_configuration=cfg,
            persist_config=False,
        )
    except ConfigException as exc:
        raise UsageError(
            f"The kubeconfig {source.describe()} is invalid for context {chosen!r}: {exc}.", _HINT
        ) from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        # Malformed entries (a list where a mapping belongs, bad base64 data): name the type
        # only, since the values may be credentials.
        raise UsageError(
            f"The kubeconfig {source.describe()} is malformed for context {chosen!r} "
            f"({type(exc).__name__}).",
            _HINT,
        ) from None
    return cfg
