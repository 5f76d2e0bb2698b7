"""Start one container: the same daemonless mechanism as tests/image, run as a kubelet would.

`nsenter --net` into the pod's namespace, then `unshare --mount --uts --ipc` (a private mount
table, the pod's hostname), where a shell mounts the container's root filesystem — the image's
unpacked root bound read-only with `readOnlyRootFilesystem`, else an overlay with a tmpfs upper
layer of its own, so nothing a container writes reaches the image or another container —, a
tmpfs per emptyDir, /proc, a minimal /dev, the service account read-only at
/var/run/secrets/kubernetes.io/serviceaccount, and then `exec`s `chroot --userspec` into it with
exactly the container's environment (`env -i`), behind `setpriv --no-new-privs` when
`allowPrivilegeEscalation: false`. Every step `exec`s the next, so the process started here *is*
the container's process: SIGTERM reaches the tool itself. A failed mount ends it with 128 (a
StartError's code). Not modelled: cgroups (resource limits), a PID namespace (its /proc shows the
host's processes), seccomp, capabilities of a root container (they are the host's).
"""

from __future__ import annotations

import posixpath
import shlex
import subprocess
from pathlib import Path

from dcgm_sim.runtime.containerspec import SERVICE_ACCOUNT_DIR, ContainerSpec
from dcgm_sim.runtime.netns import PodNetwork

DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def resolve_in_root(root: Path, path: str) -> str:
    """`path` inside the container with its symlinks followed within `root` (as a chroot sees
    them: /var/run -> /run), relative to `root`; never leaves it."""
    parts = [p for p in path.split("/") if p and p != "."]
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = root.joinpath(*resolved, part)
        if candidate.is_symlink():
            hops += 1
            if hops > 40:
                raise OSError(f"too many symlinks in {path}")
            target = str(candidate.readlink())
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p and p != "."] + parts
            continue
        resolved.append(part)
    return posixpath.join(*resolved) if resolved else ""


def script(spec: ContainerSpec, rootfs: Path, mountpoint: Path,
           service_account: Path | None) -> str:
    """The shell that sets the container's mounts up and `exec`s it (see the module doc)."""
    q = shlex.quote
    mnt = str(mountpoint)

    def at(path: str) -> str:
        return q(posixpath.join(mnt, resolve_in_root(rootfs, path)))

    lines = ["set -e", "trap 'exit 128' EXIT"]  # dash: no ERR trap
    if spec.read_only_root:
        lines.append(f"mount --bind {q(str(rootfs))} {q(mnt)}")
    else:
        layer = q(str(mountpoint.parent / "layer"))
        lines += [f"mkdir -p {layer}", f"mount -t tmpfs -o mode=755 tmpfs {layer}",
                  f"mkdir {layer}/upper {layer}/work",
                  f"mount -t overlay overlay -o lowerdir={q(str(rootfs))},"
                  f"upperdir={layer}/upper,workdir={layer}/work {q(mnt)}"]
    points = [t.path for t in spec.tmpfs] + [spec.workdir]
    if service_account is not None and spec.service_account:
        points.append(SERVICE_ACCOUNT_DIR)
    lines += [f"mkdir -p {at(p)}" for p in points]  # mount points, as runc makes them
    if spec.read_only_root:
        lines.append(f"mount -o remount,bind,ro {q(mnt)}")
    for volume in spec.tmpfs:
        options = "mode=777" + (f",size={volume.size_bytes}" if volume.size_bytes else "")
        lines.append(f"mount -t tmpfs -o {options} tmpfs {at(volume.path)}")
        if volume.read_only:
            lines.append(f"mount -o remount,ro {at(volume.path)}")
    dev = at("/dev")
    lines += [f"mount -t proc proc {at('/proc')}",
              f"mount -t tmpfs -o mode=755,size=1m tmpfs {dev}"]
    for name in DEVICES:
        lines += [f"touch {dev}/{name}", f"mount --bind /dev/{name} {dev}/{name}"]
    lines += [f"ln -s /proc/self/fd {dev}/fd", f"ln -s /proc/self/fd/0 {dev}/stdin",
              f"ln -s /proc/self/fd/1 {dev}/stdout", f"ln -s /proc/self/fd/2 {dev}/stderr",
              f"mkdir {dev}/shm", f"mount -t tmpfs -o mode=1777,size=64m tmpfs {dev}/shm"]
    if service_account is not None and spec.service_account:
        target = at(SERVICE_ACCOUNT_DIR)
        lines += [f"mount --bind {q(str(service_account))} {target}",
                  f"mount -o remount,bind,ro {target}"]
    lines.append(f"echo {q(spec.hostname)} > /proc/sys/kernel/hostname")
    groups = ",".join(str(g) for g in spec.groups)
    run = ["chroot", f"--userspec={spec.uid}:{spec.gid}", f"--groups={groups}", mnt,
           "env", "-i", "-C", spec.workdir, *(f"{k}={v}" for k, v in spec.env), *spec.argv]
    if spec.no_new_privs:
        run = ["setpriv", "--no-new-privs", *run]
    lines += ["trap - EXIT", "exec " + shlex.join(run)]
    return "\n".join(lines)


def spawn(spec: ContainerSpec, rootfs: Path, mountpoint: Path, network: PodNetwork,
          service_account: Path | None) -> subprocess.Popen[bytes]:
    """Start the container's process (its own process group) with stdout and stderr piped."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    assert network.fd is not None
    argv = [*network.nsenter_args(), "unshare", "--mount", "--uts", "--ipc", "--propagation",
            "private", "sh", "-c", script(spec, rootfs, mountpoint, service_account)]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, pass_fds=(network.fd,),
                            start_new_session=True, close_fds=True)
