"""The CLI's click group: a usage error's `fix:` line and `-o json` error document, and the
`Example:` lines in the name the user invoked."""

from __future__ import annotations

import copy
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from migrator.cli import plugins, render
from migrator.cli.commandline import ARGV_KEY
from migrator.cli.options import Output
from migrator.errors import UsageError

# click's exceptions, from wherever this typer takes click (vendored in typer >= 0.22)
_clicks = sys.modules[typer.BadParameter.__module__]


ClickUsageError: type[Exception] = _clicks.UsageError
NoArgsIsHelp: tuple[type[Exception], ...] = tuple(
    e for e in (getattr(_clicks, "NoArgsIsHelpError", None),) if e is not None)


class Group(TyperGroup):
    """A group whose commands' `Example:` lines show the name the user invoked."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        found = super().get_command(ctx, cmd_name)
        return _as_invoked(found, ctx.find_root().info_name or "dcgm-migrate")

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """An installed plugin's command (cli/plugins.py), looked up only here: `--help`
        loads no plugin."""
        name, found, rest = super().resolve_command(ctx, args)
        plugged = plugins.command(name) if name else None
        if plugged is not None:
            found = _as_invoked(plugged, ctx.find_root().info_name or "dcgm-migrate")
        return name, found, rest


class RootGroup(Group):
    """A click usage error gets a `fix:` line, and under `-o json|yaml` the error document."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta.setdefault(ARGV_KEY, list(args))  # the whole command line, for `-o`
        return list(super().parse_args(ctx, args))

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except NoArgsIsHelp:
            raise
        except ClickUsageError as exc:
            shown: Any = exc  # a click UsageError (its class is found at run time)
            shown.show()
            hint = _usage_hint(exc)
            typer.echo(f"fix: {hint}", err=True)
            output = _output_of(ctx.meta.get(ARGV_KEY, []))
            if output is not Output.table:
                error = UsageError(shown.format_message(), hint)
                render.raw({"error": render.error_document(error)}, output)
            raise typer.Exit(2) from None


def _as_invoked(cmd: Any, name: str) -> Any:
    """A copy of `cmd` whose `Example:` line names `name`."""
    if cmd is None or name == "dcgm-migrate":
        return cmd
    shown = copy.copy(cmd)
    if cmd.help:
        shown.help = cmd.help.replace("Example: dcgm-migrate ", f"Example: {name} ")
    return shown


def _usage_hint(exc: Any) -> str:
    param = getattr(exc, "param", None)
    names = set(param.opts) if param is not None else set()
    if "--phase" in names:
        return "pass --phase 1, 2 or 3"
    if "--output" in names:
        return "pass -o table, json or yaml"
    where = exc.ctx.command_path if exc.ctx else "dcgm-migrate"
    return f"see `{where} --help` for the options and their values"


def _output_of(argv: list[str]) -> Output:
    """The -o/--output the command line asked for (table when none or not a format)."""
    pairs = zip(argv, [*argv[1:], ""], strict=True)
    for a, b in pairs:
        value = (b if a in ("-o", "--output") else a[2:] if a.startswith("-o")
                 else a.split("=", 1)[1] if a.startswith("--output=") else None)
        if value is not None and value.lower() in Output.__members__:
            return Output(value.lower())
    return Output.table
