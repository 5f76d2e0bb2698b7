"""The image's name and version agree everywhere (Containerfile, images/build, docs/job.yaml,
docs/guard.yaml, migrator.__version__), and every pod of the manifests runs the image as
tests/image/test_image.py proves it can run: non-root, read-only root, an emptyDir at /tmp.
No image needed: these run in CI."""

from __future__ import annotations

import json
import posixpath
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

import migrator

REPO = Path(__file__).resolve().parents[2]
IMAGE = f"dcgm-migrate:{migrator.__version__}"


def _pods() -> list[tuple[str, dict[str, Any]]]:
    pods = []
    for manifest in ("job.yaml", "guard.yaml"):
        for doc in yaml.safe_load_all((REPO / "docs" / manifest).read_text()):
            if not doc or doc["kind"] not in {"Job", "CronJob", "Deployment"}:
                continue
            spec = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
            pods.append((f"{manifest}:{doc['kind']}", spec["template"]["spec"]))
    return pods


@pytest.mark.parametrize(("where", "pod"), _pods(), ids=[w for w, _ in _pods()])
def test_every_pod_runs_the_image_read_only_with_tmp_as_its_volume(
        where: str, pod: dict[str, Any]) -> None:
    assert pod["securityContext"]["runAsNonRoot"] is True
    # No fixed UID: the image's USER 10001 (images/build) runs it on Kubernetes, and OpenShift's
    # restricted-v2 SCC refuses any UID outside the namespace's range (tests/sim/test_openshift.py)
    assert "runAsUser" not in pod["securityContext"]
    assert all("runAsUser" not in c.get("securityContext", {}) for c in pod["containers"])
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for container in pod["containers"]:
        assert container["image"] == IMAGE, where
        assert container["command"] == ["dcgm-migrate"]  # the image's entrypoint
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, where
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
        assert "emptyDir" in mounts["/tmp"], where


def test_the_job_has_no_total_deadline_a_large_rollout_would_hit() -> None:
    """docs/runbook.md: ~12.5 h per DaemonSet at 1,000 nodes; --timeout is the progress
    deadline, so the Job sets no activeDeadlineSeconds (its comment says why)."""
    docs = {d["kind"]: d for d in yaml.safe_load_all((REPO / "docs" / "job.yaml").read_text())
            if d}
    assert "activeDeadlineSeconds" not in docs["Job"]["spec"]
    assert "--timeout" in docs["Job"]["spec"]["template"]["spec"]["containers"][0]["args"]
    verify = docs["CronJob"]["spec"]["jobTemplate"]["spec"]
    assert verify["activeDeadlineSeconds"] < 15 * 60  # shorter than the schedule's period


def test_containerfile_and_build_agree_on_version_user_and_entrypoint() -> None:
    text = (REPO / "Containerfile").read_text()
    version = re.search(r"^ARG VERSION=(.+)$", text, re.M)
    assert version is not None and version[1] == migrator.__version__
    assert 'org.opencontainers.image.version="${VERSION}"' in text
    assert "USER 10001:10001" in text and 'ENTRYPOINT ["dcgm-migrate"]' in text
    build = (REPO / "images" / "build").read_text()
    assert "UID_GID=10001" in build and '--config.entrypoint "$NAME"' in build
    assert "org.opencontainers.image.version=$VERSION" in build


def test_the_pinned_requirements_cover_every_runtime_dependency() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = {line.split("==")[0].lower().replace("_", "-")
              for line in (REPO / "images" / "requirements.txt").read_text().splitlines()
              if line and not line.startswith("#")}
    for dep in deps:
        name = re.split(r"[<>=!~ \[]", dep)[0].lower().replace("_", "-")
        assert name in pinned, f"{name} is not in images/requirements.txt: run images/lock"
    assert all("--hash=sha256:" in line
               for line in (REPO / "images" / "requirements.txt").read_text().splitlines()
               if line and not line.startswith("#"))


def _in_build_context(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore leaves `path` in the build context: the last pattern that matches
    the path or one of its parent folders decides, a `!` pattern re-including (moby's
    `patternmatcher.MatchesOrParentMatches`, which `docker build` and buildah apply)."""
    parts = path.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    included = True
    for raw in patterns:
        negated, pattern = raw.startswith("!"), raw.lstrip("!").strip("/")
        regex = (re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
                 .replace(r"\*", "[^/]*").replace(r"\?", "[^/]"))
        if any(re.fullmatch(regex, c) for c in candidates):
            included = negated
    return included


def _context_sources(containerfile: str) -> list[list[str]]:
    """The sources of every COPY and ADD that reads the build context (not `--from` another
    stage): continuation lines joined, flags (`--chown`, `--chmod`, `--link`) dropped, the
    JSON form read as JSON."""
    instructions = re.sub(r"\\\n", " ", containerfile).splitlines()
    found = []
    for line in instructions:
        words = line.split(None, 1)
        if len(words) < 2 or words[0].upper() not in ("COPY", "ADD"):
            continue
        rest = words[1].strip()
        flags = re.match(r"((?:--[a-z-]+(?:=\S*)?\s+)*)(.*)", rest)
        assert flags is not None
        if "--from=" in flags[1]:
            continue
        arguments = json.loads(flags[2]) if flags[2].startswith("[") else flags[2].split()
        found.append(arguments[:-1])
    return found


def test_every_containerfile_copy_source_is_in_the_build_context() -> None:
    """`docker build -f Containerfile .` fails on a COPY of something .dockerignore leaves out,
    of a path outside the context, or of a file a clean checkout lacks (untracked, generated):
    every source of every COPY/ADD from the context is a relative path inside it, tracked by
    git, and left in by .dockerignore with every tracked file under it. (images/buildah builds
    it from `git archive` in CI, which fails the same way.)"""
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    copies = _context_sources((REPO / "Containerfile").read_text())
    sources = [source for sources in copies for source in sources]
    assert sources, "the Containerfile copies nothing from the context"
    for source in sources:
        normal = posixpath.normpath(source)
        assert not source.startswith("/") and normal != ".." and not normal.startswith("../"), \
            f"{source} is outside the build context"
        tracked = subprocess.run(["git", "ls-files", "-z", "--", normal], cwd=REPO, check=True,
                                 capture_output=True, text=True).stdout.split("\0")
        tracked = [path for path in tracked if path]
        assert tracked, f"{source} is not in a clean checkout (not tracked by git)"
        assert _in_build_context(normal, patterns), f"{source} is excluded by .dockerignore"
        left_out = [path for path in tracked if not _in_build_context(path, patterns)]
        assert not left_out, f"{source}: .dockerignore leaves out {left_out[:5]}"
    assert not _in_build_context("simulator", patterns)  # the simulated cluster stays out
    assert not _in_build_context("simulator/dcgm_sim/server.py", patterns)
    assert not _in_build_context("migrator/__pycache__", patterns)


@pytest.mark.parametrize(("containerfile", "expected"), [
    ("COPY a b /dst/\n", [["a", "b"]]),
    ("COPY --chown=1:1 --chmod=644 a /dst\n", [["a"]]),
    ("copy --link [\"a b\", \"c\", \"/dst\"]\n", [["a b", "c"]]),
    ("ADD x \\\n  y /dst\n", [["x", "y"]]),
    ("COPY --from=build /opt /opt\nRUN cp a b\n", []),
])
def test_the_copy_reader_reads_every_form(containerfile: str,
                                          expected: list[list[str]]) -> None:
    assert _context_sources(containerfile) == expected
