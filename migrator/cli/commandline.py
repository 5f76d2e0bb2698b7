"""Every backticked `dcgm-migrate`/`kubectl` command the CLI prints gets the caller's
`--kubeconfig`, `--context` and `-n` (those given), so a copied fix acts on the same cluster."""

from __future__ import annotations

import importlib
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import typer

ARGV_KEY = "dcgm-migrate.argv"  # where the root group keeps the command line (cli/group.py)
PROGRAMS = ("dcgm-migrate", "kubectl")
_QUOTED = re.compile(r"`([^`]+)`")
_LONG = {"-n": "--namespace", "-o": "--output"}


def long_name(option: str) -> str:
    """An option's long spelling (`-n` → `--namespace`), to compare spellings."""
    return _LONG.get(option, option)


def option_values(argv: Sequence[str]) -> dict[str, str]:
    """Each `--option value`, `--option=value`, `-n value` or `-nvalue`, by long name."""
    out: dict[str, str] = {}
    for i, arg in enumerate(argv):
        head, eq, value = arg.partition("=")
        if head.startswith("--") and eq:
            out[head] = value
        elif len(arg) > 2 and not arg.startswith("--") and arg[:2] in _LONG:
            out[long_name(arg[:2])] = arg[2:]  # -nvalue
        elif arg.startswith("-") and i + 1 < len(argv):
            out[long_name(arg)] = argv[i + 1]
    return out


@dataclass(frozen=True)
class Selection:
    """The options that selected this invocation's cluster and namespace (None: not given)."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None

    @classmethod
    def of(cls, argv: Sequence[str] | None) -> Selection:
        values = option_values(argv or ())
        return cls(values.get("--kubeconfig"), values.get("--context"),
                   values.get("--namespace"))

    @classmethod
    def current(cls) -> Selection:
        return cls.of(invoked())

    def options(self) -> list[tuple[str, str]]:
        return [(name, value) for name, value in (("--kubeconfig", self.kubeconfig),
                ("--context", self.context), ("-n", self.namespace)) if value]


def command(argv: Sequence[str], selection: Selection) -> str:
    """`argv` shell-quoted, with each option of `selection` it does not set itself."""
    argv = list(argv)
    if not _talks_to_a_cluster(argv):
        return shlex.join(argv)
    given = {long_name(a.split("=", 1)[0]) for a in argv if a.startswith("-")}
    given |= {long_name(a[:2]) for a in argv if len(a) > 2 and a[:2] in _LONG}
    extra = [t for name, value in selection.options() if long_name(name) not in given
             for t in (name, value)]
    return shlex.join([*argv, *extra])


def _talks_to_a_cluster(argv: Sequence[str]) -> bool:
    """`kubectl …` and `dcgm-migrate <command> …`; not `dcgm-migrate --version`."""
    if not argv or argv[0] not in PROGRAMS:
        return False
    return argv[0] == "kubectl" or (len(argv) > 1 and not argv[1].startswith("-"))


def complete(text: str, selection: Selection) -> str:
    """`text` with each backticked command completed by `command`."""

    def one(match: re.Match[str]) -> str:
        inner = match.group(1)
        try:
            argv = shlex.split(inner)
        except ValueError:
            return match.group(0)
        done = command(argv, selection)
        return f"`{inner if done == shlex.join(argv) else done}`"

    return _QUOTED.sub(one, text) if "`" in text else text


def completed(value: Any, selection: Selection) -> Any:
    """A document with every string's commands completed."""
    if isinstance(value, str):
        return complete(value, selection)
    if isinstance(value, dict):
        return {k: completed(v, selection) for k, v in value.items()}
    if isinstance(value, list):
        return [completed(v, selection) for v in value]
    return value


def invoked() -> list[str] | None:
    """This command's command line as the user would type it again (None outside click)."""
    globals_ = importlib.import_module(
        typer.BadParameter.__module__.rsplit(".", 1)[0] + ".globals")
    ctx = globals_.get_current_context(silent=True)
    args = ctx.meta.get(ARGV_KEY) if ctx is not None else None
    if not args:
        return None
    root = str(ctx.find_root().info_name or "")
    prog = ["kubectl", "dcgm-migrate"] if root.startswith("kubectl") else ["dcgm-migrate"]
    return [*prog, *args]


def with_options(command: Sequence[str], tokens: Sequence[str]) -> list[str]:
    """`command` with the options in `tokens` (`--opt value` pairs) set: their earlier
    occurrences (`-n x`, `--namespace x`, `--namespace=x`, `-nx`) removed, the new appended."""
    names = {long_name(t) for t in tokens if t.startswith("-")}
    out: list[str] = []
    skip = False
    for arg in command:
        if skip:
            skip = False
            continue
        head = arg.split("=", 1)[0]
        if long_name(head) in names:
            skip = "=" not in arg
            continue
        if len(arg) > 2 and not arg.startswith("--") and long_name(arg[:2]) in names:
            continue  # -nvalue
        out.append(arg)
    return [*out, *tokens]


def resume(text: str, selection: Selection) -> str:
    """`status`'s `resume:` command (a bare command line), pointed at the same cluster."""
    try:
        return command(shlex.split(text), selection)
    except ValueError:
        return text


def fix_line(hint: str, invoked: Sequence[str] | None) -> str:
    """The hint with each backticked option followed by the command that passes it, and each
    command it names pointed at the same cluster; unchanged without a command line."""
    if not invoked:
        return hint
    selection = Selection.of(invoked)

    def whole(match: re.Match[str]) -> str:
        text = match.group(1)
        if text.startswith("-"):
            return f"{text}: `{shlex.join(with_options(invoked, shlex.split(text)))}`"
        return complete(match.group(0), selection)

    return _QUOTED.sub(whole, hint)
