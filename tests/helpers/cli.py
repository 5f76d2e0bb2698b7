"""Run the real CLI in-process against a simulated cluster, the way a user would type it."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from migrator.cli.app import app

CLUSTER_COMMANDS = {"plan", "apply", "rollback", "status", "verify", "unlock", "preflight",
                    "guard", "change-stack"}
SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "output.schema.json"


@functools.cache
def _validator(command: str) -> Any:
    """The validator for one command's `-o json` document (`$defs/<command>` of the schema)."""
    schema = json.loads(SCHEMA.read_text())
    return Draft202012Validator({"$ref": f"#/$defs/{command}", "$defs": schema["$defs"]},
                                format_checker=Draft202012Validator.FORMAT_CHECKER)


def validate(command: str, doc: Any) -> None:
    """Fail with every schema violation if `doc` is not what docs/output.schema.json promises."""
    errors = sorted(_validator(command).iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        raise AssertionError(f"`{command} -o json` does not match docs/output.schema.json:\n"
                             + "\n".join(f"  at {'/'.join(map(str, e.path)) or '(root)'}: "
                                          f"{e.message}" for e in errors[:10]))


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str
    command: str = ""

    def json(self) -> Any:
        """The `-o json` document, validated against docs/output.schema.json."""
        doc = json.loads(self.stdout)
        if self.command in CLUSTER_COMMANDS:
            validate("error" if self.code and "error" in doc else self.command, doc)
        return doc


def run(kubeconfig: str | None, *args: str) -> Result:
    argv = list(args)
    if kubeconfig and argv and argv[0] in CLUSTER_COMMANDS and "--kubeconfig" not in argv:
        argv += ["--kubeconfig", kubeconfig]
    res = CliRunner().invoke(app, argv, catch_exceptions=False)
    result = Result(res.exit_code, res.stdout, res.stderr, argv[0] if argv else "")
    if _wants_json(argv) and result.stdout.strip():
        result.json()  # every `-o json` document any test produces is checked against the schema
    return result


def _wants_json(argv: list[str]) -> bool:
    pairs = zip(argv, [*argv[1:], ""], strict=True)
    return any((a in ("-o", "--output") and b == "json") or a in ("-ojson", "--output=json")
               for a, b in pairs)
