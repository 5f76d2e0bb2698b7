"""`dcgm-migrate sim ...`: the simulated GPU cluster as a standalone server (docs/design.md,
"The simulated cluster").

A thin typer wrapper over `dcgm_sim.serve`, in the simulator's own distribution
(simulator/pyproject.toml), which plugs it into `dcgm-migrate` as the command `sim` through
the entry point group `dcgm_migrate.commands` (migrator/cli/plugins.py); also runnable as
`python -m migrator sim`. The tool's own distribution and its container image carry none of it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from dcgm_sim.controllers.releases import RELEASES
from dcgm_sim.serve import ServeError, ServeOptions, serve
from dcgm_sim.stacknames import STACKS
from migrator.cli.group import Group

STACK_CHOICES = "|".join(STACKS)
RELEASE_CHOICES = "|".join(RELEASES)

sim_app = typer.Typer(
    name="sim",
    cls=Group,
    help="The simulated GPU cluster: a Kubernetes API stand-in on loopback, for demos and tests.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@sim_app.callback()
def _sim() -> None:
    """The simulated GPU cluster (for demos and tests)."""


@sim_app.command("serve")
def serve_cmd(
    nodes: Annotated[int, typer.Option("--nodes", help="Number of GPU nodes.")] = 3,
    stack: Annotated[str, typer.Option(
        "--stack", help=f"Which GPU Operator stack to seed: {STACK_CHOICES} (mixed and both "
                        "only with an --operator-release that lets both CRs exist at once)."
                        )] = "gpucluster",
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (0: any free).")] = 0,
    kubeconfig_out: Annotated[Path | None, typer.Option(
        "--kubeconfig-out", help="Write the kubeconfig here (default: a temporary file).")] = None,
    time_scale: Annotated[float, typer.Option(
        "--time-scale", help="Real seconds per simulated second (0.01 runs 100x faster).")] = 1.0,
    operator_reconcile: Annotated[float, typer.Option(
        "--operator-reconcile", metavar="SECONDS",
        help="Run the GPU Operator imitation, as every real cluster runs the operator, with its "
             "informers resyncing every SECONDS (simulated; controller-runtime's default is "
             "36000, 10 h). Between resyncs it reconciles as upstream: on events of its CRs, "
             "DaemonSets and node labels, every 5 s while not ready, every minute for a "
             "GPUCluster. 0 turns it off.")] = 36000.0,  # controllers.operator.RESYNC_SECONDS
    operator_release: Annotated[str, typer.Option(
        "--operator-release", metavar="RELEASE",
        help=f"Which GPU Operator release the cluster runs: {RELEASE_CHOICES}. shipped (the "
             "released operator, v26.7.0 on) refuses a ClusterPolicy and a GPUCluster at once, "
             "so --stack mixed|both need future-coexistence (a release that lets both stacks "
             "coexist, none has shipped) or shared-services-fork (the seed author's fork, with "
             "the shared nvidia-dcgm / nvidia-dcgm-exporter Services; it upgrades the seeded "
             "cluster at the first reconcile). PUT /sim/v1/operator {\"release\": ...} "
             "upgrades a running server.")]
    = "shipped",
    no_operator: Annotated[bool, typer.Option(
        "--no-operator", help="No GPU Operator imitation (same as --operator-reconcile 0).")]
    = False,
    pod_start_seconds: Annotated[float, typer.Option(
        "--pod-start-seconds", help="Simulated seconds from pod creation to Ready.")] = 2.0,
    termination_seconds: Annotated[float, typer.Option(
        "--termination-seconds",
        help="Simulated seconds a deleted pod takes to stop (at most its grace period).")] = 1.0,
    namespace: Annotated[str, typer.Option(
        "--namespace", "-n", help="Namespace of the operator's objects.")] = "gpu-operator",
    gpucluster_dcgm: Annotated[bool, typer.Option(
        "--gpucluster-dcgm/--no-gpucluster-dcgm",
        help="GPUCluster: standalone DCGM (nvidia-dcgm-dra) with the remote-engine exporter, "
             "or the embedded exporter only.")] = True,
    error_rate: Annotated[float, typer.Option(
        "--error-rate", help="Fraction of requests answered 500/503/429 (0..1).")] = 0.0,
    latency_ms: Annotated[float, typer.Option(
        "--latency-ms", help="Added latency per request, milliseconds.")] = 0.0,
    fail_nth_write: Annotated[int | None, typer.Option(
        "--fail-nth-write", help="Fail the Nth write request (once).")] = None,
    watch_window: Annotated[int | None, typer.Option(
        "--watch-window", metavar="N",
        help="Keep only the last N events: a watch or a list continue token from an older "
             "resourceVersion gets 410 Expired, as after the real watch cache window or etcd "
             "compaction (default: 500000).")] = None,
    rbac: Annotated[list[Path] | None, typer.Option(
        "--rbac", metavar="FILE",
        help="Create these RBAC roles and bindings in the cluster at start (repeatable; as "
             "`kubectl apply -f` would, which works as well later on); each "
             "User/ServiceAccount they bind gets an https kubeconfig with its own token, so "
             "kubectl runs as it.")] = None,
    tls: Annotated[bool, typer.Option(
        "--tls/--no-tls",
        help="Also serve https (self-signed) with kubeconfigs for the admin and "
             "the --rbac identities: kubectl sends tokens and --as only over https.")] = True,
    ip_family: Annotated[str, typer.Option(
        "--ip-family", metavar="FAMILY",
        help="The cluster's IP families: ipv4 | ipv6 | dual (dual-stack, IPv4 primary). Sets "
             "the nodes' podCIDRs, the pods' IPs, the Service CIDRs and the EndpointSlice "
             "address types.")] = "ipv4",
    images: Annotated[Path | None, typer.Option(
        "--images", metavar="DIR",
        help="Run the pods of this OCI image for real (images/build's folder or .oci.tar; "
             "as root): `kubectl apply -f docs/guard.yaml` starts the guard, `kubectl logs` "
             "shows its output. Pods of other images stay simulated.")] = None,
    platform: Annotated[str, typer.Option(
        "--platform", metavar="PLATFORM",
        help="kubernetes | openshift: OpenShift refuses EndpointSlices with pod or Service "
             "addresses unless the writer may create endpointslices/restricted, and runs "
             "Deployment and Job pods under restricted-v2 (a UID from the namespace's "
             "openshift.io/sa.scc.uid-range).")] = "kubernetes",
) -> None:
    """Seed a simulated cluster, print `READY <url> <kubeconfig>`, serve until SIGINT/SIGTERM.

    Example: dcgm-migrate sim serve --nodes 10 --time-scale 0.1 --kubeconfig-out sim.kubeconfig
    """
    options = ServeOptions(
        nodes=nodes, stack=stack, port=port, kubeconfig_out=kubeconfig_out,
        time_scale=time_scale, operator_reconcile=0.0 if no_operator else operator_reconcile,
        pod_start_seconds=pod_start_seconds, termination_seconds=termination_seconds,
        namespace=namespace,
        gpucluster_dcgm=gpucluster_dcgm, error_rate=error_rate, latency_ms=latency_ms,
        fail_nth_write=fail_nth_write, watch_window=watch_window, rbac=tuple(rbac or ()),
        tls=tls, operator_release=operator_release, ip_family=ip_family, images=images,
        platform=platform)
    try:
        code = serve(options)
    except ServeError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    raise typer.Exit(code)


def main(argv: list[str] | None = None) -> int:
    """`sim` on its own: a usage error is one `error: ...` line and exit code 2."""
    try:
        result = sim_app(args=argv, prog_name="dcgm-migrate sim", standalone_mode=False)
    except typer.Exit as done:
        return int(done.exit_code)
    except typer.Abort:
        return 130
    except Exception as err:
        # typer vendors click: its UsageError family carries `format_message` and `exit_code`.
        message = getattr(err, "format_message", None)
        if message is None:
            raise
        if type(err).__name__ == "NoArgsIsHelpError":
            typer.echo(message(), err=True)
        else:
            typer.echo(f"error: {message()}", err=True)
        return int(getattr(err, "exit_code", 2))
    return result if isinstance(result, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
