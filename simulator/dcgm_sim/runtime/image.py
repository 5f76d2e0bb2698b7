"""The tool's OCI image as the runtime runs it: read from an image layout, unpacked once.

`sim serve --images DIR` names what images/build writes: its output folder (one
`dcgm-migrate-<version>.oci.tar` in it), the `.oci.tar` itself, or an unpacked OCI image layout
(a folder with `index.json`). The index names the image's tag (`org.opencontainers.image.ref.name`,
`0.1.0`), the config its name (`org.opencontainers.image.title`, `dcgm-migrate`); a pod's image
reference is this image when its repository's last path component and its tag are those
(`dcgm-migrate:0.1.0`, `REGISTRY/dcgm-migrate:0.1.0`), as a node that pulled the pushed image
would run it. Layers are applied in order (gzip tarballs; whiteouts are not handled: images/build
makes one layer).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

REF_ANNOTATION = "org.opencontainers.image.ref.name"
TITLE_LABEL = "org.opencontainers.image.title"


class ImageError(ValueError):
    """The folder or archive is not an image this runtime can run (one sentence)."""


@dataclass(frozen=True)
class OciImage:
    name: str  # `dcgm-migrate`
    tag: str  # `0.1.0`
    digest: str  # the manifest's
    config: dict[str, Any]  # the image config's `config` (User, Env, Entrypoint, Cmd, ...)
    rootfs: Path

    @property
    def reference(self) -> str:
        return f"{self.name}:{self.tag}"

    def matches(self, reference: str) -> bool:
        """Whether a pod's `image` names this image: `[REGISTRY/…/]NAME:TAG`, a digest ignored."""
        ref = reference.split("@", 1)[0]
        slash = ref.rfind("/")
        repository, colon, tag = ref[slash + 1:].partition(":")
        return repository == self.name and (tag if colon else "latest") == self.tag


class _Layout:
    """An OCI image layout's files, from its folder or straight out of its archive."""

    def __init__(self, source: Path) -> None:
        if source.is_dir() and not (source / "index.json").is_file():
            found = sorted(source.glob("*.oci.tar"))
            if len(found) != 1:
                raise ImageError(f"{source}: expected one *.oci.tar (images/build's output) or "
                                 f"an OCI layout's index.json, found {len(found)} archives")
            source = found[0]
        if not source.exists():
            raise ImageError(f"{source}: no such image archive or folder")
        self.source = source
        self._tar: tarfile.TarFile | None = None
        self._members: dict[str, tarfile.TarInfo] = {}
        if source.is_file():
            try:
                self._tar = tarfile.open(source)  # noqa: SIM115 (closed by close())
                self._members = {m.name.removeprefix("./"): m for m in self._tar.getmembers()}
            except (tarfile.TarError, OSError) as err:
                raise ImageError(f"{source}: cannot read the OCI archive: {err}") from err

    def open(self, name: str) -> IO[bytes]:
        try:
            if self._tar is None:
                return (self.source / name).open("rb")
            member = self._tar.extractfile(self._members[name])
        except (KeyError, OSError, tarfile.TarError) as err:
            raise ImageError(f"{self.source}: no {name} in the image layout") from err
        if member is None:
            raise ImageError(f"{self.source}: {name} is not a file")
        return member

    def json(self, name: str) -> dict[str, Any]:
        with self.open(name) as handle:
            try:
                doc: dict[str, Any] = json.load(handle)
            except ValueError as err:
                raise ImageError(f"{self.source}: {name} is not JSON: {err}") from err
        return doc

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()


def _blob(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"blobs/{algorithm}/{hexdigest}"


def _unpack(layout: _Layout, layers: list[dict[str, Any]], rootfs: Path) -> None:
    rootfs.mkdir()
    for layer in layers:
        if not str(layer.get("mediaType", "")).endswith("tar+gzip"):
            raise ImageError(f"{layout.source}: layer type {layer.get('mediaType')} "
                             "not supported")
        with layout.open(_blob(layer["digest"])) as blob, subprocess.Popen(
                ["tar", "-xz", "-C", str(rootfs), "--numeric-owner", "--same-permissions"],
                stdin=subprocess.PIPE, stderr=subprocess.PIPE) as tar:
            assert tar.stdin is not None and tar.stderr is not None
            with contextlib.suppress(BrokenPipeError):
                shutil.copyfileobj(blob, tar.stdin, 1 << 20)
            tar.stdin.close()
            error = tar.stderr.read()
        if tar.returncode != 0:
            raise ImageError(f"{layout.source}: cannot unpack a layer: "
                             f"{error.decode(errors='replace').strip()}")


def default_cache(source: Path) -> Path:
    """Where unpacked roots are kept: beside the archive (images/build's folder), so a second
    `sim serve` of the same image unpacks nothing and removing the folder removes them."""
    folder = source if source.is_dir() else source.parent
    return folder / "sim-rootfs"


def _unpack_into(layout: _Layout, manifest: dict[str, Any], cache: Path, target: Path) -> None:
    """Unpack beside `target`, then rename it into place; other builds' roots are removed."""
    scratch = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=cache))
    try:
        _unpack(layout, list(manifest.get("layers") or []), scratch / "rootfs")
        (scratch / "complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        scratch.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for other in cache.iterdir():  # roots of earlier builds of the image
        if other != target and not other.name.startswith("."):
            shutil.rmtree(other, ignore_errors=True)


def load(source: Path, cache: Path | None = None) -> OciImage:
    """Read the image `source` names; its layers are unpacked (as root: owners and modes kept)
    into `cache`/<manifest digest>/rootfs unless an earlier run did. ImageError when it is not
    one tagged image."""
    layout = _Layout(source)
    try:
        tagged = [m for m in layout.json("index.json").get("manifests") or []
                  if (m.get("annotations") or {}).get(REF_ANNOTATION)]
        if len(tagged) != 1:
            raise ImageError(f"{source}: expected one tagged image in the index, "
                             f"found {len(tagged)}")
        entry = tagged[0]
        manifest = layout.json(_blob(entry["digest"]))
        run: dict[str, Any] = layout.json(_blob(manifest["config"]["digest"])).get("config") or {}
        name = (run.get("Labels") or {}).get(TITLE_LABEL)
        if not name:
            raise ImageError(f"{source}: the image config has no {TITLE_LABEL} label")
        cache = cache if cache is not None else default_cache(source)
        target = cache / str(entry["digest"]).partition(":")[2][:32]
        if not (target / "complete").exists():
            cache.mkdir(parents=True, exist_ok=True)
            with (cache / ".lock").open("w") as lock:  # one unpacker at a time (parallel tests)
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not (target / "complete").exists():
                    _unpack_into(layout, manifest, cache, target)
        return OciImage(name=str(name), tag=str(entry["annotations"][REF_ANNOTATION]),
                        digest=str(entry["digest"]), config=run, rootfs=target / "rootfs")
    finally:
        layout.close()
