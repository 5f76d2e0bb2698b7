"""What the sim's workload tests (Deployments, Jobs) share: a manifest applied with kubectl,
and the official client's typed APIs read as the test knows the objects (the models' fields
are all Optional)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client


def apply_object(kubectl: Callable[..., str], tmp_path: Path, obj: dict[str, Any]) -> str:
    """`kubectl apply -f` of one object, written to a file as a user would have it."""
    path = tmp_path / f"{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj))
    return kubectl("apply", "-f", str(path))


def core(api: client.ApiClient) -> Any:
    return client.CoreV1Api(api)


def apps(api: client.ApiClient) -> Any:
    return client.AppsV1Api(api)


def batch(api: client.ApiClient) -> Any:
    return client.BatchV1Api(api)
