"""`dcgm-migrate guard`: the long-running alias guard (see migrator/engine/guard.py), thin.

In a pod (docs/guard.yaml) it runs until SIGTERM, logging one timestamped line per decision
to stderr, and gives its Lease up on the way out. `--once` runs one full pass without the
Lease (a manual check or repair; writes are still guarded) and prints what it did.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from typing import Annotated, Any

import typer

from migrator.cli.options import Context, Debug, Kubeconfig, Namespace, Output, OutputOpt


def _identity() -> str:
    """The pod name in-cluster (HOSTNAME), plus the pid: unique per process, never a secret."""
    return f"{os.environ.get('HOSTNAME') or socket.gethostname()}_{os.getpid()}"


def _log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    sys.stderr.write(f"{stamp} {message}\n")
    sys.stderr.flush()


def _table(doc: dict[str, Any]) -> None:
    for alias in doc["aliases"]:
        state = f"held: {alias['held']}" if alias["held"] else "not held"
        typer.echo(f"Service/{alias['name']} → {alias['selector']} ({state})")
    for c in doc["corrections"]:
        typer.echo(f"{c['action']} Service/{c['service']}: {c['reason']}")
    for s in doc["skipped"]:
        typer.echo(f"skipped {s}")
    if not doc["corrections"]:
        typer.echo("nothing to correct")
    verdict = doc["verdict"]
    typer.echo(f"verdict: {verdict['summary']}")


def guard(
    lease_name: Annotated[str, typer.Option("--lease-name", help="The coordination.k8s.io "
                                            "Lease the replicas elect a leader on.")]
    = "dcgm-migrate-guard",
    identity: Annotated[str | None, typer.Option("--identity", help="This replica's name in "
                                                 "the Lease (default: pod name and pid).")]
    = None,
    lease_seconds: Annotated[int, typer.Option("--lease-seconds", help="How long a lease "
                                               "lasts without renewal.", min=2)] = 15,
    resync: Annotated[float, typer.Option("--resync", help="Seconds between full passes "
                                          "without events.", min=1.0)] = 30.0,
    once: Annotated[bool, typer.Option("--once", help="One full pass, no Lease, then exit.")]
    = False,
    kubeconfig: Kubeconfig = None, context: Context = None,
    namespace: Namespace = "gpu-operator", output: OutputOpt = Output.table,
    debug: Debug = False,
) -> None:
    """Keep the tool's aliases safe while the operator re-renders: hold an alias on the app
    label while its DaemonSet lacks the common label, move it forward again once the label is
    back and rolled out, re-sync its config with the source Service. Runs until SIGTERM.

    Example: dcgm-migrate guard --once -o json
    """
    from migrator.cli import render
    from migrator.engine.guard import Guard, GuardSettings
    from migrator.kube.client import Kube
    from migrator.model.stacks import load_catalog

    settings = GuardSettings(lease_name=lease_name, identity=identity or _identity(),
                             lease_seconds=lease_seconds, resync_seconds=resync)
    kube = Kube.connect(kubeconfig, context)
    try:
        g = Guard(kube, namespace, load_catalog(), settings, log=_log)
        if once:
            doc = {"namespace": namespace, **g.reconcile().as_dict(),
                   "verdict": g.verdict().as_dict()}
            if output is Output.table:
                _table(doc)
            else:
                render.document(doc, output)
            return
        stop = threading.Event()

        def _stop(signum: int, _frame: Any) -> None:
            _log(f"signal {signum}: stopping")
            stop.set()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _stop)
            signal.signal(signal.SIGINT, _stop)
        _log(f"guarding aliases in namespace {namespace} as {settings.identity} "
             f"(Lease {lease_name})")
        g.run(stop)
    finally:
        kube.close()
