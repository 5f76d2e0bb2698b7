"""`dcgm-migrate guard`: the long-running alias guard (engine/guard.py), thin. In a pod
(docs/guard.yaml) it runs until SIGTERM, logging each decision to stderr; `--once` runs one
full pass without the Lease and prints what it did."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from contextlib import closing, nullcontext
from typing import Annotated, Any

import typer

from migrator.cli import render
from migrator.cli.options import Cluster
from migrator.engine.guard import Guard, GuardSettings
from migrator.engine.locate import require_dcgm
from migrator.engine.reports import GuardReport
from migrator.engine.serving import MetricsServer, parse_address
from migrator.errors import UsageError
from migrator.kube.client import Kube
from migrator.kube.transport import RetryPolicy
from migrator.model.stacks import load_catalog


def _log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    sys.stderr.write(f"{stamp} {message}\n")
    sys.stderr.flush()


def guard(
    *,
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
    metrics_bind_address: Annotated[str | None, typer.Option(
        "--metrics-bind-address", help="[HOST]:PORT to serve /metrics, /healthz and /readyz "
        "on (as controller-runtime's flag: :8080 every address, 127.0.0.1:0 a free loopback "
        "port; 0: off). Default: off.")] = None,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", help="Serve /metrics, /healthz and /readyz on this port of every "
        "address (short for --metrics-bind-address :PORT).", min=0, max=65535)] = None,
    verdict_seconds: Annotated[float, typer.Option(
        "--verdict-seconds", help="The verdict's cross-check (a whole read of the namespace) "
        "at most this often after a watched change; at least hourly regardless. The verdict "
        "itself follows each change from the guard's caches.", min=1.0)] = 300.0,
    cluster: Cluster,
) -> None:
    """Keep the tool's aliases safe while the operator re-renders: hold an alias on the app
    label while its DaemonSet lacks the common label, move it forward again once the label is
    back and rolled out, re-sync its config with the source Service. Runs until SIGTERM.

    Example: dcgm-migrate guard --once -o json
    """
    address = _bind_address(metrics_bind_address, metrics_port)
    if once and address is not None:
        raise UsageError("--metrics-bind-address/--metrics-port serve nothing with --once "
                         "(one pass, then exit).")
    # Bound before connecting: a port in use is a usage error before anything is tried.
    server = (MetricsServer(address, "--metrics-port" if metrics_port is not None else
                            "--metrics-bind-address") if address is not None else None)
    settings = GuardSettings(lease_name=lease_name, identity=identity or
                             f"{os.environ.get('HOSTNAME') or socket.gethostname()}_{os.getpid()}",
                             lease_seconds=lease_seconds, resync_seconds=resync,
                             verdict_seconds=verdict_seconds)
    namespace = cluster.namespace
    with (closing(server) if server is not None else nullcontext(),
          closing(Kube.connect(cluster.kubeconfig, cluster.context,
                               retry=RetryPolicy(notice=_log))) as kube):
        catalog = load_catalog()
        require_dcgm(kube, namespace, catalog)  # as every command: exit 2 naming where
        g = Guard(kube, namespace, catalog, settings, log=_log)
        if once:
            with g.recorder.running():  # the Events of its writes go out before it exits
                report = GuardReport(namespace, g.reconcile(), g.verdict())
            render.document(report, cluster.output)
            return
        stop = threading.Event()

        def _stop(signum: int, _frame: Any) -> None:
            _log(f"signal {signum}: stopping")
            stop.set()

        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGTERM, signal.SIGINT):
                signal.signal(number, _stop)
        _log(f"guarding aliases in namespace {namespace} as {settings.identity} "
             f"(Lease {lease_name})")
        g.run(stop, server=server)


def _bind_address(bind: str | None, port: int | None) -> tuple[str, int] | None:
    """(host, port) to serve on, or None: `--metrics-port N` is `--metrics-bind-address :N`."""
    try:
        address = parse_address(bind) if bind is not None else None
    except ValueError as exc:
        raise UsageError(f"--metrics-bind-address {exc}.") from exc
    if port is None:
        return address
    if bind is not None and (address is None or address[1] != port):
        raise UsageError(f"--metrics-bind-address {bind!r} names another port than "
                         f"--metrics-port {port}.")
    return address or ("0.0.0.0", port)
