"""What the kubelet asks the runtime to run for one container: argv, environment, user, root
filesystem and volumes, from the pod spec and the image config. Pure (no I/O).

After upstream: the command (`kuberuntime.makeContainerCommand` and the CRI's
`WithProcessArgs`: `command` replaces the image's Entrypoint and drops its Cmd, `args` alone
replaces Cmd), `$(VAR)` expansion of env values, command and args
(`third_party/forked/golang/expansion`), the downward API's `fieldRef`
(`kubelet_pods.go podFieldSelectorRuntimeValue`), the user (container securityContext, then
the pod's, then the image's `User`), `runAsNonRoot` refusing uid 0
(`verifyRunAsNonRoot`: CreateContainerConfigError), and the environment layering of containerd's
CRI plugin (HOSTNAME, then the image's Env, then the kubelet's: service variables and the
container's env). emptyDir volumes become tmpfs mounts; other volume types are refused (the
tool's manifests use none). The service account's token, CA and namespace are mounted by the
runtime when `automountServiceAccountToken` is not false.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

Obj = Mapping[str, Any]


class SpecError(ValueError):
    """The container cannot be made (kubelet reason CreateContainerConfigError)."""


@dataclass(frozen=True)
class Tmpfs:
    path: str
    size_bytes: int | None = None
    read_only: bool = False


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    uid: int
    gid: int
    groups: tuple[int, ...]
    workdir: str
    hostname: str
    read_only_root: bool
    no_new_privs: bool
    tmpfs: tuple[Tmpfs, ...]
    service_account: bool


_QUANTITY = re.compile(r"^([0-9.]+)([KMGTPE]i?|[kmunpe])?$")
_FACTORS = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
            "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
            "Ei": 2**60}


def quantity_bytes(value: object) -> int:
    """A resource quantity (`64Mi`, `1G`, `1024`) in bytes."""
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) in ("m", "u", "n", "p", "e"):
        raise SpecError(f"quantity {value!r} is not a size the sim's runtime understands")
    return int(float(match.group(1)) * _FACTORS[match.group(2) or ""])


def expand(text: str, env: Mapping[str, str]) -> str:
    """`$(NAME)` replaced by NAME's value when defined (left as is otherwise), `$$` → `$`."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    out.append(env.get(name, text[i:end + 1]))
                    i = end + 1
                    continue
        out.append(c)
        i += 1
    return "".join(out)


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_value(pod: Obj, path: str) -> str:
    """The downward API's value of a `fieldRef.fieldPath`."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"), "status.podIP": status.get("podIP"),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs") or []),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs") or []),
    }
    if path in simple:
        return str(simple[path] or "")
    sub = _SUBSCRIPT.match(path)
    if sub:
        return str((meta.get(sub.group(1)) or {}).get(sub.group(2), ""))
    raise SpecError(f"unsupported fieldRef fieldPath {path!r}")


def _image_user(image: Obj, passwd: Mapping[str, tuple[int, int]]) -> tuple[int, int | None]:
    user, _, group = str(image.get("User") or "0").partition(":")
    if user.isdigit():
        uid = int(user)
        gid = next((g for u, g in passwd.values() if u == uid), None)
    elif user in passwd:
        uid, gid = passwd[user]
    else:
        raise SpecError(f"unable to find user {user}: no matching entries in passwd file")
    if group:
        gid = int(group) if group.isdigit() else None
    return uid, gid


def _security(pod: Obj, container: Obj, key: str) -> Any:
    own = (container.get("securityContext") or {}).get(key)
    if own is not None:
        return own
    return ((pod.get("spec") or {}).get("securityContext") or {}).get(key)


def _env(pod: Obj, container: Obj, image: Obj, service_env: Mapping[str, str],
         hostname: str) -> tuple[dict[str, str], dict[str, str]]:
    """(the process's environment, the kubelet's variables `$(VAR)` may name)."""
    kubelet: dict[str, str] = dict(service_env)
    for var in container.get("env") or []:
        name = str(var["name"])
        source = var.get("valueFrom")
        if source is None:
            kubelet[name] = expand(str(var.get("value", "")), kubelet)
        elif "fieldRef" in source:
            kubelet[name] = field_value(pod, str(source["fieldRef"]["fieldPath"]))
        else:
            raise SpecError(f"env {name}: valueFrom {sorted(source)} is not supported by the "
                            "sim's runtime (fieldRef only)")
    final = {"HOSTNAME": hostname}
    for item in image.get("Env") or []:
        key, _, value = str(item).partition("=")
        final[key] = value
    final.update(kubelet)
    return final, kubelet


def _argv(container: Obj, image: Obj, kubelet_env: Mapping[str, str]) -> tuple[str, ...]:
    command = [expand(str(a), kubelet_env) for a in container.get("command") or []]
    args = [expand(str(a), kubelet_env) for a in container.get("args") or []]
    if command:
        argv = command + args
    elif args:
        argv = [str(a) for a in image.get("Entrypoint") or []] + args
    else:
        argv = [str(a) for a in (image.get("Entrypoint") or []) + (image.get("Cmd") or [])]
    if not argv:
        raise SpecError("no command specified")
    return tuple(argv)


def _volumes(pod: Obj, container: Obj) -> tuple[Tmpfs, ...]:
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
    mounts = []
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount.get("name"))
        if volume is None:
            raise SpecError(f"volumeMount {mount.get('name')!r}: no such volume in the pod")
        if "emptyDir" not in volume:
            kind = next((k for k in volume if k != "name"), "?")
            raise SpecError(f"volume {volume['name']!r}: {kind} volumes are not supported by "
                            "the sim's runtime (emptyDir only)")
        limit = (volume.get("emptyDir") or {}).get("sizeLimit")
        mounts.append(Tmpfs(str(mount["mountPath"]),
                            quantity_bytes(limit) if limit is not None else None,
                            bool(mount.get("readOnly"))))
    return tuple(mounts)


def container_spec(pod: Obj, container: Obj, image: Obj, *, service_env: Mapping[str, str],
                   passwd: Mapping[str, tuple[int, int]] | None = None) -> ContainerSpec:
    """The runtime's view of `container` of `pod`, `image` being the image config's `config`
    and `passwd` its /etc/passwd (name -> uid, gid). SpecError when it cannot run."""
    spec = pod.get("spec") or {}
    name = str(container.get("name", ""))
    hostname = str(spec.get("hostname") or (pod.get("metadata") or {}).get("name", ""))[:63]
    env, kubelet_env = _env(pod, container, image, service_env, hostname)
    image_uid, image_gid = _image_user(image, passwd or {})
    uid_set = _security(pod, container, "runAsUser")
    uid = int(uid_set) if uid_set is not None else image_uid
    gid_set = _security(pod, container, "runAsGroup")
    gid = int(gid_set) if gid_set is not None else (
        image_gid if uid_set is None or uid == image_uid else None) or 0
    if _security(pod, container, "runAsNonRoot") and uid == 0:
        raise SpecError("container has runAsNonRoot and image will run as root "
                        f"(pod: {(pod.get('metadata') or {}).get('name')!r}, container: {name})")
    pod_context = spec.get("securityContext") or {}
    extra = [int(g) for g in pod_context.get("supplementalGroups") or []]
    if pod_context.get("fsGroup") is not None:
        extra.append(int(pod_context["fsGroup"]))
    groups = tuple(dict.fromkeys([gid, *extra]))
    context = container.get("securityContext") or {}
    return ContainerSpec(
        name=name, argv=_argv(container, image, kubelet_env), env=tuple(env.items()),
        uid=uid, gid=gid, groups=groups,
        workdir=str(container.get("workingDir") or image.get("WorkingDir") or "/"),
        hostname=hostname, read_only_root=bool(context.get("readOnlyRootFilesystem")),
        no_new_privs=context.get("allowPrivilegeEscalation") is False,
        tmpfs=_volumes(pod, container),
        service_account=spec.get("automountServiceAccountToken") is not False)


def service_env(host: str, port: int) -> dict[str, str]:
    """The `kubernetes` Service's variables every container gets (`kubelet_pods.go`
    `getServiceEnvVarMap`; the Docker-links style ones as well)."""
    url_host = f"[{host}]" if ":" in host else host
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
            "KUBERNETES_PORT": f"tcp://{url_host}:{port}",
            f"KUBERNETES_PORT_{port}_TCP": f"tcp://{url_host}:{port}",
            f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
            f"KUBERNETES_PORT_{port}_TCP_PORT": str(port),
            f"KUBERNETES_PORT_{port}_TCP_ADDR": host}


def parse_passwd(text: str) -> dict[str, tuple[int, int]]:
    """An /etc/passwd as name -> (uid, gid)."""
    users = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[2].isdigit() and fields[3].isdigit():
            users[fields[0]] = (int(fields[2]), int(fields[3]))
    return users


def container_names(pod: Obj) -> Sequence[str]:
    return [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("containers") or []]
