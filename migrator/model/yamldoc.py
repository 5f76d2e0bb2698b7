"""YAML read the one safe way: libyaml's parser when PyYAML was built with it (its wheels are),
a tenth of the pure-Python parser's time on a kubeconfig, whose certificates and keys are
kilobytes of base64, and on the plans every command loads. Same documents, same errors."""

from __future__ import annotations

from typing import IO, Any

import yaml

_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(source: str | IO[str]) -> Any:
    """`yaml.safe_load`, with libyaml's parser where there is one."""
    return yaml.load(source, Loader=_SAFE_LOADER)  # a safe loader
