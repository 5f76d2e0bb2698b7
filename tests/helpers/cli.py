"""Run the real CLI in-process against a simulated cluster, the way a user would type it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from typer.testing import CliRunner

from migrator.cli.app import app

CLUSTER_COMMANDS = {"plan", "apply", "rollback", "status", "verify", "unlock", "preflight"}


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run(kubeconfig: str | None, *args: str) -> Result:
    argv = list(args)
    if kubeconfig and argv and argv[0] in CLUSTER_COMMANDS and "--kubeconfig" not in argv:
        argv += ["--kubeconfig", kubeconfig]
    res = CliRunner().invoke(app, argv, catch_exceptions=False)
    return Result(res.exit_code, res.stdout, res.stderr)
