"""The OCI images (docs/image.md), run as a container runtime would run them: their layers
unpacked in order (whiteouts applied), the config's entrypoint, environment and user
(non-root), inside a chroot. Each test runs on both images: the one images/build makes
(mmdebstrap + umoci) and the one buildah builds from the Containerfile (images/buildah).

DCGM_MIGRATE_IMAGE names images/build's archive (`dcgm-migrate-<version>.oci.tar`) or its
folder, DCGM_MIGRATE_CONTAINERFILE_IMAGE images/buildah's; the tests need root (chroot, mount
namespaces):

    BASE_OUT=/var/tmp/dcgm-base images/build
    BASE_TAR=/var/tmp/dcgm-base/rootfs.tar images/buildah
    DCGM_MIGRATE_IMAGE=/var/tmp/dcgm-migrate-image \\
    DCGM_MIGRATE_CONTAINERFILE_IMAGE=/var/tmp/dcgm-migrate-containerfile \\
        python3 -m pytest tests/image -n 0

`.ci/run` builds both and runs them with the whole suite. Without an image (or root) they skip
locally and fail under CI=true: CI must run them. DCGM_MIGRATE_ARM64_IMAGE names the arm64
image (`ARCH=arm64 images/build`; its binaries run through qemu-user's binfmt_misc handler
on another host): its tests run when it is set.

The guard runs as Kubernetes runs docs/guard.yaml's pod: the root filesystem mounted read-only,
a tmpfs only where the manifest mounts an emptyDir, the service account's token and CA at
/var/run/secrets/kubernetes.io/serviceaccount, the API server from KUBERNETES_SERVICE_HOST/PORT
(`sim serve` on loopback, with guard.yaml's Role as the guard's only permissions)."""

from __future__ import annotations

import base64
import json
import select
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

import migrator
from tests.helpers import built_image

REPO = Path(__file__).resolve().parents[2]
MAX_CONTAINERFILE_MIB = 95  # its base carries apt and the rest of bookworm's slim set
NS = "gpu-operator"
SA_DIR = "run/secrets/kubernetes.io/serviceaccount"  # /var/run is a link to /run in the image


@dataclass
class Image:
    built_by: str  # a key of built_image.IMAGES
    rootfs: Path
    config: dict[str, Any]  # the OCI image config (its "config" is the runtime's settings)
    archive: Path

    @property
    def run(self) -> dict[str, Any]:
        run: dict[str, Any] = self.config["config"]
        return run


def _archive(path: Path) -> Path:
    if path.is_dir():
        found = sorted(path.glob("dcgm-migrate-*.oci.tar"))
        assert len(found) == 1, f"{path}: expected one dcgm-migrate-*.oci.tar, found {found}"
        path = found[0]
    return path


def _blob(layout: Path, digest: str) -> Path:
    algorithm, hexdigest = digest.split(":")
    return layout / "blobs" / algorithm / hexdigest


def _unpack_layer(layer: Path, rootfs: Path) -> None:
    """One layer over the ones below it, as the OCI image spec's "Applying changesets" says:
    a `.wh.<name>` entry deletes <name> from the lower layers, `.wh..wh..opq` empties its
    folder of them; the whiteout entries themselves are not extracted."""
    with tarfile.open(layer) as tar:
        names = tar.getnames()
    for name in names:
        folder, _, base = name.rstrip("/").rpartition("/")
        if not base.startswith(".wh."):
            continue
        target = rootfs / folder
        victims = (list(target.iterdir()) if target.is_dir() else []) \
            if base == ".wh..wh..opq" else [target / base.removeprefix(".wh.")]
        for victim in victims:
            if victim.is_dir() and not victim.is_symlink():
                shutil.rmtree(victim)
            elif victim.exists() or victim.is_symlink():
                victim.unlink()
    subprocess.run(["tar", "-xzf", str(layer), "-C", str(rootfs), "--numeric-owner",
                    "--same-permissions", "--exclude=.wh.*"], check=True)


@pytest.fixture(scope="module", params=built_image.wanted())
def image(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Image:
    """The archive's image for tag <version>, its layers unpacked into a private folder.
    No image: a skip locally, a failure under CI=true (.ci/run builds both)."""
    built_by: str = request.param
    archive = _archive(built_image.require("image tests", ("unshare", "chroot"),
                                           "chroot and mounts need root", built_by))
    layout = tmp_path_factory.mktemp("layout")
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="data")
    index = json.loads((layout / "index.json").read_text())
    (entry,) = [m for m in index["manifests"] if m.get("annotations", {}).get(
        "org.opencontainers.image.ref.name") == migrator.__version__]
    manifest = json.loads(_blob(layout, entry["digest"]).read_text())
    config = json.loads(_blob(layout, manifest["config"]["digest"]).read_text())
    rootfs = tmp_path_factory.mktemp("rootfs")
    rootfs.chmod(0o755)  # a runtime's root folder, unless a layer says otherwise (buildah's do not)
    for layer in manifest["layers"]:
        assert layer["mediaType"].endswith("tar+gzip"), layer["mediaType"]
        _unpack_layer(_blob(layout, layer["digest"]), rootfs)
    shutil.rmtree(layout)
    return Image(built_by=built_by, rootfs=rootfs, config=config, archive=archive)


def run_in(image: Image, args: list[str], *, read_only: bool = False,
           volumes: tuple[str, ...] = ("/tmp",), env: dict[str, str] | None = None,
           service_account: Path | None = None, timeout: float = 120,
           after: str = "") -> subprocess.CompletedProcess[str]:
    """The image's entrypoint with `args`, as its user, in a private mount namespace: /proc,
    a minimal /dev, a tmpfs at each of `volumes` (the manifest's emptyDirs) and, with
    `read_only`, the root filesystem read-only. `after` runs (as root) in the same namespace
    after the command, its output appended after a marker line."""
    run = image.run
    newroot = image.rootfs.parent / (image.rootfs.name + "-mnt")
    newroot.mkdir(exist_ok=True)
    r = shlex.quote(str(newroot))
    lines = ["set -e", f"mount --bind {shlex.quote(str(image.rootfs))} {r}"]
    if read_only:
        lines.append(f"mount -o remount,bind,ro {r}")
    for volume in volumes:
        lines.append(f"mount -t tmpfs -o mode=1777,size=64m tmpfs {r}{volume}")
    lines += [f"mount -t proc proc {r}/proc",
              f"mount -t tmpfs -o mode=755,size=1m tmpfs {r}/dev"]
    for dev in ("null", "zero", "random", "urandom", "tty"):
        lines += [f"touch {r}/dev/{dev}", f"mount --bind /dev/{dev} {r}/dev/{dev}"]
    if service_account is not None:
        target = f"{r}/{SA_DIR}"
        lines += [f"mount --bind {shlex.quote(str(service_account))} {target}",
                  f"mount -o remount,bind,ro {target}"]
    environment = dict(item.split("=", 1) for item in run.get("Env", []))
    environment.update(env or {})
    command = [*run["Entrypoint"], *run.get("Cmd", []), *args]
    lines += ["set +e",
              f"chroot --userspec={run['User']} {r} env -i -C {run.get('WorkingDir', '/')} "
              + shlex.join([f"{k}={v}" for k, v in environment.items()] + command),
              "rc=$?"]
    if after:
        lines += ["echo '--- after'", after]
    lines.append("exit $rc")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           "\n".join(lines)], capture_output=True, text=True, timeout=timeout)


def test_the_image_config_runs_the_tool_as_a_non_root_user(image: Image) -> None:
    run = image.run
    assert run["Entrypoint"] == ["dcgm-migrate"] and not run.get("Cmd")
    user, _, group = run["User"].partition(":")
    assert int(user) != 0 and int(group) != 0
    assert run["Labels"]["org.opencontainers.image.version"] == migrator.__version__
    arch = "arm64" if image.built_by.endswith("arm64") else "amd64"
    assert image.config["os"] == "linux" and image.config["architecture"] == arch
    passwd = (image.rootfs / "etc" / "passwd").read_text()
    assert f":{user}:{group}:" in passwd  # a named user: tools that look it up find it


def test_the_image_is_small_and_has_no_build_tools(image: Image) -> None:
    venv = image.rootfs / "opt" / "dcgm-migrate"
    site = venv / "lib" / "python3.11" / "site-packages"
    assert (site / "migrator" / "__init__.py").exists()
    assert not (site / "dcgm_sim").exists()  # the simulated cluster is no part of the product
    for absent in ("bin/pip", "bin/pip3"):
        assert not (venv / absent).exists(), absent
    assert not list(site.glob("pip*")) and not list(site.glob("setuptools*"))
    # the Containerfile's base is debian:bookworm-slim, apt included (docs/image.md)
    package_manager = ("apt", "apt-get") if image.built_by == "images/build" else ()
    for tool in ("gcc", "cc", "make", "pip", "pip3", *package_manager):
        assert not (image.rootfs / "usr" / "bin" / tool).exists(), tool
    for cache in ("root/.cache", "var/cache/apt/archives", "var/lib/apt/lists"):
        assert not [p for p in (image.rootfs / cache).glob("*") if p.name != "partial"], cache
    for leftover in ("root/.config", "root/build-ca.crt"):  # images/buildah's RUN-only mount
        assert not (image.rootfs / leftover).exists(), leftover
    limit = 60 if image.built_by == "images/build" else MAX_CONTAINERFILE_MIB
    assert image.archive.stat().st_size < limit * 2**20, image.archive.stat().st_size


def test_version(image: Image) -> None:
    res = run_in(image, ["--version"], read_only=True)
    assert res.returncode == 0, res.stderr
    assert migrator.__version__ in res.stdout
    assert "Traceback" not in res.stderr


def test_the_image_carries_no_simulator_and_demo_says_so(image: Image) -> None:
    """The image is the tool only: `demo` (which needs the simulated cluster) refuses in one
    sentence with the fix and exit 2, on the Job's read-only root with HOME=/tmp."""
    res = run_in(image, ["demo", "--nodes", "4"], read_only=True, env={"HOME": "/tmp"})
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert "needs the simulated cluster, which is not installed here" in res.stderr, res.stderr
    assert "fix: install the simulated cluster beside the tool" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    for package in ("dcgm_sim", "dcgm_sim_cli"):
        probe = subprocess.run(["chroot", str(image.rootfs), "/opt/dcgm-migrate/bin/python",
                                "-c", f"import {package}"], capture_output=True, text=True,
                               timeout=60)
        assert f"No module named '{package}'" in probe.stderr, probe.stderr


class Sim:
    """`dcgm-migrate sim serve` on loopback (the host's tool, this checkout), with
    docs/guard.yaml's Role installed: the guard's service account gets its own token."""

    def __init__(self, folder: Path) -> None:
        self.kubeconfig = folder / "kubeconfig"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "migrator", "sim", "serve", "--nodes", "3",
             "--time-scale", "0.05", "--kubeconfig-out", str(self.kubeconfig),
             "--rbac", str(REPO / "docs" / "guard.yaml")],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        readable, _, _ = select.select([self.proc.stdout], [], [], 30)
        assert readable, "sim serve printed no READY line"
        assert self.proc.stdout.readline().startswith("READY ")
        self.admin = Path(f"{self.kubeconfig}-sim-admin")
        self.guard = Path(f"{self.kubeconfig}-{NS}-dcgm-migrate-guard")
        for _ in range(100):
            if self.admin.exists() and self.guard.exists():
                break
            time.sleep(0.1)

    def tool(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "migrator", *args, "--kubeconfig",
                               str(self.admin)], cwd=REPO, capture_output=True, text=True,
                              timeout=120)

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kubectl", "--kubeconfig", str(self.admin), "-n", NS, *args],
                              capture_output=True, text=True, timeout=60)

    def get(self, kind: str, name: str) -> dict[str, Any]:
        res = self.kubectl("get", kind, name, "-o", "json")
        assert res.returncode == 0, res.stderr
        got: dict[str, Any] = json.loads(res.stdout)
        return got

    def service_account(self, folder: Path) -> tuple[Path, dict[str, str]]:
        """The guard's token and CA as the kubelet mounts them, and the pod's environment."""
        doc = yaml.safe_load(self.guard.read_text())
        cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
        folder.mkdir()
        (folder / "token").write_text(user["token"])
        (folder / "ca.crt").write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        (folder / "namespace").write_text(NS)
        for name in ("token", "ca.crt", "namespace"):
            (folder / name).chmod(0o644)
        folder.chmod(0o755)
        host, port = cluster["server"].removeprefix("https://").rsplit(":", 1)
        return folder, {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    served = Sim(tmp_path)
    try:
        yield served
    finally:
        served.stop()


def _guard_pod() -> tuple[dict[str, Any], dict[str, Any]]:
    docs = {d["kind"]: d for d in yaml.safe_load_all((REPO / "docs" / "guard.yaml").read_text())
            if d}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    return pod, pod["containers"][0]


def test_guard_once_with_the_manifests_security_context(image: Image, sim: Sim,
                                                       tmp_path: Path) -> None:
    """After phase 3, an operator re-render drops the common label from a DaemonSet's pod
    template: one `guard --once` pass, in the image as guard.yaml's pod (read-only root, its
    emptyDirs only, its ServiceAccount's Role only), holds the alias back on the app label."""
    pod, container = _guard_pod()
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = tuple(m["mountPath"] for m in container.get("volumeMounts", [])
                   if "emptyDir" in volumes[m["name"]])
    assert "runAsUser" not in pod["securityContext"]  # the image's own USER runs it
    assert sim_user(image) == "10001"
    applied = sim.tool("apply", "--phase", "3", "--yes", "-o", "json")
    assert applied.returncode == 0, applied.stderr[-2000:]
    # what an operator upgrade that re-renders without the common label does
    patch = sim.kubectl("patch", "ds", "nvidia-dcgm-dra", "--type", "json", "-p", json.dumps(
        [{"op": "remove", "path": "/spec/template/metadata/labels/nvidia.com~1gpu-operator.dcgm"}]))
    assert patch.returncode == 0, patch.stderr
    account, env = sim.service_account(tmp_path / "serviceaccount")
    (image.rootfs / SA_DIR).mkdir(parents=True, exist_ok=True)  # the runtime's mount point
    env.update({e["name"]: e.get("value", "guard-0") for e in container.get("env", [])})
    # The Deployment's args less what a single pass has no use for (and refuses with --once):
    # its Lease and its metrics listener, each an option and its value.
    args: list[str] = []
    skip = False
    for a in container["args"]:
        if skip or a in ("--lease-name", "--metrics-bind-address", "--metrics-port"):
            skip = not skip
            continue
        args.append(a)
    res = run_in(image, [*args, "--once", "-o", "json"], read_only=True, volumes=mounts,
                 env=env, service_account=account,
                 after="find " + " ".join(f"{shlex.quote(str(image.rootfs) + '-mnt')}{m}"
                                          for m in mounts) + " -mindepth 1")
    out, _, written = res.stdout.partition("--- after\n")
    assert res.returncode in (0, 1), res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "Read-only file system" not in res.stderr
    doc = json.loads(out)
    assert [(c["action"], c["service"]) for c in doc["corrections"]] == [
        ("hold", "nvidia-dcgm")], doc["corrections"]  # decided and written inside the image
    assert written.strip() == "", f"the guard wrote files under its volumes: {written}"
    service = sim.get("svc", "nvidia-dcgm")
    assert "dcgm-migrate/guard-held" in service["metadata"].get("annotations", {}), service
    assert "app" in service["spec"]["selector"], service["spec"]["selector"]


def sim_user(image: Image) -> str:
    return str(image.run["User"]).split(":")[0]
