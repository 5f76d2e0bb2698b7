"""What every cluster command opens and asks: its session and the question before a write."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import typer

from migrator import commands
from migrator.cli import render
from migrator.cli.live import make_progress
from migrator.cli.options import Cluster, Output
from migrator.commands import Session
from migrator.engine.progress import Listener
from migrator.engine.reports import Question
from migrator.errors import UsageError
from migrator.kube.client import Kube
from migrator.kube.transport import RetryPolicy


@contextmanager
def session(cluster: Cluster) -> Iterator[Session]:
    """One connection for one command, its progress stream on stderr (a table prints each
    warning once, in the report; under -o json/yaml the progress stream says them too)."""
    progress = make_progress(quiet=False, warnings=cluster.output is not Output.table)
    # A long Retry-After (API Priority and Fairness) is said as it is waited out.
    kube = Kube.connect(cluster.kubeconfig, cluster.context,
                        retry=RetryPolicy(notice=progress.message if progress else None))
    try:
        yield Session(kube, cluster.namespace, listener=progress or Listener())
    except UsageError:
        raise  # bad input is refused in one sentence and its fix, without the report's warnings
    except BaseException:
        if progress is not None:  # no report will print the warnings: say them here
            progress.say_held()
        raise
    finally:
        if progress is not None:
            progress.close()
        kube.close()


def interactive() -> bool:
    return sys.stdin.isatty()


def ask(text: str) -> bool:
    """A yes/no question on stderr, default no; Ctrl-D is no answer (bad input, exit 2)."""
    try:
        return typer.confirm(text, default=False, err=True)
    except typer.Abort as aborted:  # click's answer to Ctrl-C and Ctrl-D: told apart
        if isinstance(aborted.__context__, KeyboardInterrupt):
            raise aborted.__context__ from None
        raise UsageError("No answer at the question (end of input, Ctrl-D).",
                         commands.ABORTED_HINT) from None


@dataclass
class Confirm:
    """The question before the first write (skipped with --yes or without a terminal); `shown`:
    the warnings its table printed, not repeated by the report."""

    yes: bool
    output: Output
    shown: tuple[str, ...] = ()

    def __call__(self, question: Question) -> bool:
        if self.yes or not interactive():
            return True
        if self.output is Output.table:
            render.report_table(question)
            self.shown = question.report.warnings
        target = question.target
        return ask(f"Write these changes to context {target.context} (server {target.server}), "
                   f"namespace {target.namespace}?")
