"""Connection settings in kubectl's order: `--kubeconfig`, `$KUBECONFIG` (merged), `~/.kube/config`,
the pod's service account, read by the official client's loaders. Here: the files, the context,
and one `UsageError` naming (never quoting: tokens) what is wrong; the proxy by Go's rules."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import Configuration
from kubernetes.config import ConfigException, load_incluster_config
from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger

from migrator.errors import UsageError
from migrator.kube.proxy import client_proxy, proxy_for

_HINT = "pass a working file with --kubeconfig (or set KUBECONFIG) and a valid --context"
# Keep-alive connections per server, at least: the guard's 3 watches and 16 concurrent writes.
POOLED = 32


@dataclass(frozen=True)
class Source:
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
            raise UsageError(f"The kubeconfig file {kubeconfig} does not exist or is not a file.",
                             "pass the path of an existing kubeconfig with --kubeconfig")
        return Source((path,))
    listed = environ.get("KUBECONFIG", "")
    if listed:
        paths = tuple(os.path.expanduser(p) for p in listed.split(os.pathsep) if p)
        present = tuple(p for p in paths if os.path.isfile(p))
        if not present:
            raise UsageError(f"None of the files in KUBECONFIG ({listed}) exists.",
                             "fix or unset KUBECONFIG, or pass --kubeconfig")
        return Source(present)
    home = Path(environ.get("HOME") or os.path.expanduser("~")) / ".kube" / "config"
    if home.is_file():
        return Source((str(home),))
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return Source((), in_cluster=True)
    raise UsageError(f"No kubeconfig found: {home} does not exist, KUBECONFIG is not set and "
                     "this is not running inside a cluster.", _HINT)


def _merged(source: Source) -> KubeConfigMerger:
    """The files merged by the client (a name's first entry wins, as in kubectl)."""
    where = source.describe()
    try:
        merger = KubeConfigMerger(os.pathsep.join(source.paths))  # type: ignore[no-untyped-call]
    except OSError as exc:
        raise UsageError(f"Cannot read the kubeconfig file {exc.filename or where}: "
                         f"{exc.strerror or exc}.", _HINT) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        name = mark.name if mark is not None and mark.name in source.paths else where
        # `from None`: the YAML error quotes the offending line, which may hold a token.
        raise UsageError(f"The kubeconfig file {name} is not valid YAML{line}.", _HINT) from None
    except ConfigException:
        raise UsageError(f"The kubeconfig {where} is empty.", _HINT) from None
    except (AttributeError, TypeError, KeyError):
        raise UsageError(f"The kubeconfig {where} is not a kubeconfig (not a mapping, or an "
                         "entry without a name).", _HINT) from None
    return merger


def _context(merger: KubeConfigMerger, where: str, context: str | None) -> str:
    """The context to use (else the first file's current-context, as kubectl); UsageError when
    it is unknown or none is set."""
    config = merger.config.value if merger.config is not None else {}
    names = [str(entry["name"]) for entry in config.get("contexts") or []]
    current = next((str(doc["current-context"]) for doc in merger.config_files.values()
                    if isinstance(doc, dict) and doc.get("current-context")), "")
    wanted = context or current
    if not names:
        raise UsageError(f"The kubeconfig {where} defines no contexts.", _HINT)
    if not wanted:
        raise UsageError(f"The kubeconfig {where} has no current-context and no --context was "
                         "given.", f"pass --context (one of: {', '.join(names)})")
    if wanted not in names:
        raise UsageError(f"Context {wanted!r} is not defined in the kubeconfig {where}.",
                         f"pass --context with one of: {', '.join(names)}")
    return wanted


def _configuration(host: str | None = None) -> Any:
    configuration = Configuration(host=host)
    configuration.proxy = None
    return configuration


def _finished(configuration: Any) -> Any:
    """With kubectl's proxy (the client's own `no_proxy` matching is not Go's: cleared), POOLED
    connections at least, and no urllib3 retries (transport.py retries)."""
    configuration.proxy, configuration.proxy_headers = client_proxy(
        configuration.proxy or proxy_for(configuration.host, os.environ))
    configuration.no_proxy = None
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0,
                                                POOLED)
    configuration.retries = False
    return configuration


def load(kubeconfig: str | None = None, context: str | None = None) -> tuple[Any, str]:
    """The client Configuration and the context's name ("in-cluster" for the service account)."""
    source = resolve_source(kubeconfig)
    configuration = _configuration()
    if source.in_cluster:
        if context:
            raise UsageError(f"--context {context} was given but no kubeconfig exists "
                             "(running in-cluster).", _HINT)
        try:
            load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration, try_refresh_token=True)
        except ConfigException as exc:
            raise UsageError(f"Cannot use the in-cluster service account: {exc}.",
                             _HINT) from None
        return _finished(configuration), "in-cluster"
    merger = _merged(source)
    chosen = _context(merger, source.describe(), context)
    try:
        # As load_kube_config: paths relative to each file, refreshed auth written back.
        loader = KubeConfigLoader(  # type: ignore[no-untyped-call]
            config_dict=merger.config, active_context=chosen, config_base_path=None,
            config_persister=merger.save_changes)
        loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    except ConfigException as exc:
        raise UsageError(f"The kubeconfig {source.describe()} is invalid for context "
                         f"{chosen!r}: {exc}.", _HINT) from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        # Malformed entries: name the type only, values may be credentials.
        raise UsageError(f"The kubeconfig {source.describe()} is malformed for context "
                         f"{chosen!r} ({type(exc).__name__}).", _HINT) from None
    return _finished(configuration), chosen


def for_server(url: str, token: str | None = None) -> Any:
    """A bare URL with an optional bearer token (the simulated cluster, tests)."""
    configuration = _configuration(url.rstrip("/"))
    if token:
        configuration.api_key["BearerToken"] = f"Bearer {token}"  # as the loader sets it
    return _finished(configuration)
