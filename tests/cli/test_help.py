"""CLI conventions: --help of every command carries an example, --version, shell completion,
the kubectl plugin's program name."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from migrator import __version__
from migrator.cli import plugins
from migrator.cli.app import app, prog_name


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command path, the installed simulated cluster's `demo` and `sim` as it plugs them
    in (cli/plugins.py) in place of the tool's stand-ins."""
    for name, found in group.commands.items():
        cmd = (plugins.command(name) if not path else None) or found
        yield (*path, name)
        if hasattr(cmd, "commands"):  # a group (typer vendors its own click)
            yield from _commands(cmd, (*path, name))


ALL = sorted(_commands(typer.main.get_group(app)))


def test_the_command_tree_is_the_documented_one() -> None:
    names = {" ".join(c) for c in ALL}
    assert {"plan", "apply", "rollback", "status", "verify", "unlock", "preflight", "demo",
            "sim", "sim serve"} <= names


@pytest.mark.parametrize("command", [c for c in ALL if c != ("sim",)], ids=" ".join)
def test_every_command_help_shows_an_example_of_itself(command: tuple[str, ...]) -> None:
    res = CliRunner().invoke(app, [*command, "--help"], prog_name="dcgm-migrate")
    assert res.exit_code == 0, res.output
    flat = " ".join(res.stdout.split())
    match = re.search(r"Example: (dcgm-migrate .+?) Options:", flat)
    assert match, f"no example in `{' '.join(command)} --help`:\n{res.stdout}"
    assert match.group(1).startswith("dcgm-migrate " + " ".join(command))


def test_a_mistyped_command_gets_a_suggestion() -> None:
    res = CliRunner().invoke(app, ["stauts"], prog_name="dcgm-migrate")
    assert res.exit_code == 2
    assert "Did you mean 'status'?" in res.output


def test_version_prints_the_one_version() -> None:
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0
    assert res.stdout.strip() == f"dcgm-migrate {__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def test_no_arguments_prints_help_with_the_exit_codes() -> None:
    res = CliRunner().invoke(app, [], prog_name="dcgm-migrate")
    assert "Usage: dcgm-migrate" in res.output
    assert "Exit codes: 0 done; 1 a gate stopped the run safely" in " ".join(res.output.split())


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o default -F"),
                                           ("zsh", "#compdef dcgm-migrate"),
                                           ("fish", "complete --command dcgm-migrate")])
def test_shell_completion_script_is_available(shell: str, marker: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # typer detects the user's shell; this switch lets the test name it instead
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    res = CliRunner().invoke(app, ["--show-completion", shell], prog_name="dcgm-migrate")
    assert res.exit_code == 0, res.output
    assert marker in res.stdout and "_DCGM_MIGRATE_COMPLETE" in res.stdout


def test_completion_completes_commands_and_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    def complete(words: str) -> list[str]:
        monkeypatch.setenv("_DCGM_MIGRATE_COMPLETE", "complete_bash")
        monkeypatch.setenv("COMP_WORDS", words)
        monkeypatch.setenv("COMP_CWORD", str(len(words.split()) - (0 if words.endswith(" ")
                                                                    else 1)))
        res = CliRunner().invoke(app, [], prog_name="dcgm-migrate")
        return res.stdout.split()

    assert complete("dcgm-migrate ap") == ["apply"]
    assert complete("dcgm-migrate demo --stack ") == ["gpucluster", "clusterpolicy"]
    assert "--phase" in complete("dcgm-migrate rollback --")


def test_kubectl_plugin_shows_the_kubectl_command_line() -> None:
    assert prog_name("/usr/local/bin/kubectl-dcgm_migrate") == "kubectl dcgm-migrate"
    assert prog_name("/usr/local/bin/dcgm-migrate") is None  # click's default: the file name


def test_install_completion_writes_the_script_for_the_shell(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    res = CliRunner().invoke(app, ["--install-completion", "bash"], prog_name="dcgm-migrate")
    assert res.exit_code == 0, res.output
    script = tmp_path / ".bash_completions" / "dcgm-migrate.sh"
    assert "_DCGM_MIGRATE_COMPLETE=complete_bash" in script.read_text()
    assert str(script) in (tmp_path / ".bashrc").read_text()


def test_main_freezes_what_the_imports_made_so_no_collection_walks_it_again() -> None:
    """The start-up target (docs/performance.md, Targets): every command pays the collections
    of the objects its imports made, the interpreter's last ones at exit too, unless `main`
    freezes them first. Measured at exit, in a process of its own."""
    probe = ("import atexit, gc, sys\n"
             "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n"
             "from migrator.cli.app import main\n"
             "sys.argv = ['dcgm-migrate', '--version']\n"
             "main()\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(__version__)
    frozen = int(re.search(r"frozen (\d+)", done.stderr).group(1))  # type: ignore[union-attr]
    assert frozen > 10_000, frozen  # the kubernetes client, typer, rich, the tool: ~60,000
