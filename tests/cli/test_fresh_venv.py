"""The README's promise on a fresh machine: a new virtualenv, the README's install command run
on a copy of the checkout, then `dcgm-migrate demo --nodes 4`, `--version` and the kubectl
plugin from that venv alone. Slow (it installs every dependency); needs the package index.

And the package layout (docs/architecture.md, Package layout): the top-level phases/ and plans/
folders install as `migrator.phases` / `migrator.plans` (setuptools' package-dir), from a wheel,
from an sdist and editable from a clone made without symlinks, never as top-level `phases` /
`plans`; the test run itself imports them from this checkout. These build offline
(`--no-build-isolation`, with the test environment's setuptools) and install with `--no-deps`
into venvs that see the test environment's packages through a path entry only."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from importlib import resources
from pathlib import Path

import pytest
import setuptools

from migrator import __version__

REPO = Path(__file__).resolve().parents[2]
GUARD_SECONDS = 300  # kills a hung install instead of hanging the suite; not an assertion
NOT_COPIED = (".git", "__pycache__", "*.egg-info", "build", "dist", ".*_cache")


def copy_checkout(dest: Path) -> None:
    """The checkout without its build output, caches and virtualenvs (.ci-venv, any folder
    holding a pyvenv.cfg)."""
    skip = shutil.ignore_patterns(*NOT_COPIED)

    def ignore(folder: str, names: list[str]) -> set[str]:
        return set(skip(folder, names)) | {
            name for name in names if (Path(folder) / name / "pyvenv.cfg").is_file()}

    shutil.copytree(REPO, dest, ignore=ignore)


def readme_install_and_demo() -> tuple[str, str]:
    """The README's one-line install-and-demo command, split at `&&`."""
    block = re.search(r"## Try it.*?```bash\n(.*?)\n```", (REPO / "README.md").read_text(),
                      re.S)
    assert block, "README has no 'Try it' bash block"
    install, demo = (part.strip() for part in block.group(1).strip().split("&&"))
    assert demo == "dcgm-migrate demo"
    return install, demo


def test_the_readme_commands_are_the_promised_ones() -> None:
    install, _ = readme_install_and_demo()
    assert install == "python3 -m pip install . ./simulator"
    text = (REPO / "README.md").read_text()
    assert "python3 -m pip install -e '.[test]' -e ./simulator && python3 -m pytest" in text


@pytest.mark.slow(seconds=200)
@pytest.mark.timeout(2 * GUARD_SECONDS)  # a venv, an install of every dependency and the demo
def test_fresh_venv_installs_and_runs_the_demo(tmp_path: Path) -> None:
    install, demo = readme_install_and_demo()
    src = tmp_path / "checkout"
    copy_checkout(src)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                   timeout=GUARD_SECONDS)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "KUBECONFIG", "NO_COLOR")}
    # PIP_COMPILE=false: pip installs the same files but does not byte-compile every module of
    # every dependency (the kubernetes client alone is thousands), which was a third of the
    # install's CPU; Python compiles what the commands below import, as on any first run. (pip
    # reads PIP_NO_COMPILE=1 as --compile: a negated flag's variable takes a boolean.)
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv),
               PIP_COMPILE="false")

    def sh(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=GUARD_SECONDS)

    installed = sh(install, src)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-3000:]
    assert sh("command -v dcgm-migrate", tmp_path).stdout.strip() == str(
        venv / "bin" / "dcgm-migrate")

    # Outside the checkout: only the venv is used. --time-scale only shortens the simulated
    # waits (the default paces phase 1 at about 20 s for a watcher; test_demo.py covers how it
    # is chosen).
    run = sh(f"{demo} --nodes 4 --time-scale 0.005", tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = run.stdout[run.stdout.rindex("Summary"):]
    assert "4 nodes" in summary
    # Phase 1 in place: a hold, a label write and a restore per DaemonSet, a patch per pod.
    for row in (r"1 label\s+completed\s+14", r"2 alias\s+completed\s+2",
                r"3 switch\s+completed\s+2", r"nvidia-dcgm-exporter\s+4\s+4\s+4\s+yes"):
        assert re.search(row, summary), (row, summary)
    assert "verdict OK" in summary
    assert "DaemonSet/nvidia-dcgm-exporter-dra: 4 pods relabelled in place" in run.stderr

    # The repository's phases/ and plans/ folders install inside the package, never as generic
    # top-level names that would collide with anything else in site-packages.
    python = venv / "bin" / "python"
    for name in ("phases", "plans"):
        generic = sh(f"{python} -c 'import {name}'", tmp_path)
        assert generic.returncode != 0 and "ModuleNotFoundError" in generic.stderr, name
    inside = sh(f"{python} -c 'import migrator.phases as p, migrator.model.stacks as s; "
                f"print(p.__file__, [m.NAME for m in p.PHASES], "
                f"s.load_catalog().common.state_configmap)'", tmp_path)
    assert inside.returncode == 0, inside.stderr
    where, names = inside.stdout.split(" ", 1)
    assert Path(where).is_relative_to(venv) and "site-packages/migrator/phases" in where
    assert names.strip() == "['label', 'alias', 'switch'] dcgm-migrate-state"

    version = sh("dcgm-migrate --version", tmp_path)
    assert version.stdout.strip() == f"dcgm-migrate {__version__}"
    if shutil.which("kubectl"):
        plugin = sh("kubectl dcgm-migrate --help", tmp_path)
        assert plugin.returncode == 0, plugin.stderr
        assert plugin.stdout.startswith("Usage: kubectl dcgm-migrate")


# ---- the package layout ---------------------------------------------------------------------

# Run by each venv's python: where the two packages come from, and whether the generic names
# import at all.
PROBE = """
import importlib, json, sys
from importlib import resources
import migrator, migrator.phases, migrator.plans
from migrator.model.stacks import load_catalog
plans = resources.files("migrator.plans")
found = {"migrator": migrator.__file__, "phases": migrator.phases.__file__,
         "names": [m.NAME for m in migrator.phases.PHASES], "plans": str(plans),
         "yaml": sorted(p.name for p in plans.iterdir() if p.name.endswith(".yaml")),
         "configmap": load_catalog().common.state_configmap}
for name in ("phases", "plans"):
    try:
        importlib.import_module(name)
        found["top-level " + name] = sys.modules[name].__file__
    except ModuleNotFoundError as exc:
        found["top-level " + name] = None if exc.name == name else repr(exc)
print(json.dumps(found))
"""
CATALOG = sorted(p.name for p in (REPO / "plans").glob("*.yaml"))


def clean_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "KUBECONFIG", "NO_COLOR")
           and not k.startswith("PIP_")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv),
               PYTHONNOUSERSITE="1")
    return env


def fresh_venv(venv: Path) -> Path:
    """A venv whose own site-packages is empty; the test environment's site-packages folders
    are on its path through a .pth file of plain paths (the dependencies, pip and setuptools),
    so their .pth files never run: an editable install of this checkout there cannot answer the
    venv's imports. Returns the venv's python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=GUARD_SECONDS)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], check=True, capture_output=True, text=True,
                          timeout=GUARD_SECONDS).stdout.strip()
    ours = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    assert ours, sys.path
    (Path(site) / "test-environment.pth").write_text("\n".join(ours) + "\n")
    return python


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=GUARD_SECONDS, check=False)


def probe(python: Path, cwd: Path, env: dict[str, str]) -> dict[str, object]:
    done = run([str(python), "-c", PROBE], cwd, env)
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, object] = json.loads(done.stdout)
    assert found["names"] == ["label", "alias", "switch"], found
    assert found["yaml"] == CATALOG and found["configmap"] == "dcgm-migrate-state", found
    return found


def pip_install(python: Path, *args: str, cwd: Path, env: dict[str, str]) -> None:
    # --no-compile: the same files without their bytecode; the probe compiles what it imports
    done = run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                "--no-build-isolation", "--ignore-installed", "--no-compile", *args], cwd, env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


def test_the_package_list_names_every_package() -> None:
    """pyproject.toml lists the packages (discovery cannot name a mapped folder): every package
    folder under migrator/ and under each package-dir folder must be in it, and nothing of the
    simulated cluster, whose own pyproject.toml (simulator/) lists every package folder there."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {name: folder for name, folder in config["package-dir"].items() if name}
    assert mapped == {"migrator.phases": "phases", "migrator.plans": "plans"}
    simulator = tomllib.loads((REPO / "simulator" / "pyproject.toml").read_text())
    assert sorted(simulator["tool"]["setuptools"]["packages"]) == sorted(
        setuptools.find_packages(str(REPO / "simulator")))
    expected = set(setuptools.find_packages(str(REPO), include=["migrator", "migrator.*"]))
    for name, folder in mapped.items():
        assert (REPO / folder / "__init__.py").is_file(), folder
        expected |= {name} | {f"{name}.{sub}" for sub in setuptools.find_packages(
            str(REPO / folder))}
    assert sorted(config["packages"]) == sorted(expected)


def test_the_suite_imports_phases_and_plans_from_this_checkout() -> None:
    """The test run's `migrator` is the checkout's folder; `migrator.phases` / `migrator.plans`
    come from the editable install's mapping to this checkout's phases/ and plans/ (an editable
    install of another checkout, or none, fails here first)."""
    import migrator.phases
    import migrator.plans
    assert not any((REPO / "migrator" / name).exists() for name in ("phases", "plans"))
    assert Path(migrator.__file__) == REPO / "migrator" / "__init__.py"
    assert Path(str(migrator.phases.__file__)) == REPO / "phases" / "__init__.py", (
        "migrator.phases is not this checkout's phases/: run `pip install -e .` here")
    assert Path(str(resources.files("migrator.plans"))) == REPO / "plans"


@pytest.mark.slow(seconds=12)
@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_wheel_and_sdist_install_phases_and_plans_inside_the_package(
        tmp_path: Path, kind: str) -> None:
    src, dist = tmp_path / "checkout", tmp_path / "dist"
    copy_checkout(src)
    dist.mkdir()
    env = clean_env(tmp_path / "venv")
    # The PEP 517 hook that `python -m build` (and `pip wheel --no-build-isolation`, in a
    # subprocess of its own) calls: the same artifact without a second interpreter and pip's
    # startup.
    built = run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                 f"build_meta.build_{kind}(sys.argv[1])", str(dist)], src, env)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    (artifact,) = dist.iterdir()

    phases_py = sorted(p.name for p in (REPO / "phases").glob("*.py"))
    plans_files = sorted([*CATALOG, "__init__.py"])
    if kind == "wheel":
        with zipfile.ZipFile(artifact) as wheel:
            names = wheel.namelist()
        # the tool alone: the simulated cluster is a distribution of its own (simulator/)
        assert {n.split("/")[0] for n in names} == {
            "migrator", f"dcgm_migrate-{__version__}.dist-info"}, sorted(names)
        inside = "migrator/"
    else:
        with tarfile.open(artifact) as sdist:
            names = [n.split("/", 1)[1] for n in sdist.getnames() if "/" in n]
        assert not any(n.startswith(("migrator/phases", "migrator/plans")) for n in names)
        inside = ""  # the source layout: pyproject.toml's package-dir maps it when installed
    assert sorted(n.rsplit("/", 1)[1] for n in names
                  if n.startswith(f"{inside}phases/") and n.endswith(".py")) == phases_py
    assert sorted(n.rsplit("/", 1)[1] for n in names
                  if re.fullmatch(rf"{inside}plans/[^/]+", n)) == plans_files

    python = fresh_venv(tmp_path / "venv")
    pip_install(python, str(artifact), cwd=tmp_path, env=env)
    found = probe(python, tmp_path, env)
    site = tmp_path / "venv" / "lib"
    for key, where in (("migrator", "migrator/__init__.py"), ("phases", "migrator/phases/"),
                       ("plans", "migrator/plans")):
        path = Path(str(found[key]))
        assert path.is_relative_to(site) and where in path.as_posix(), (key, path)
    assert found["top-level phases"] is None and found["top-level plans"] is None, found
    # without the simulated cluster, `demo` and `sim` refuse in one sentence with the fix
    demo = run([str(python), "-m", "migrator", "demo"], tmp_path, env)
    assert demo.returncode == 2, demo.stdout + demo.stderr
    assert "needs the simulated cluster, which is not installed here" in demo.stderr
    assert "python3 -m pip install ./simulator" in demo.stderr


@pytest.mark.slow(seconds=30)
def test_a_clone_without_symlinks_installs_editable_and_runs_its_tests(tmp_path: Path) -> None:
    """`git -c core.symlinks=false clone` (Windows' default) of the committed tree, installed
    editable as .ci/run does: `migrator.phases` / `migrator.plans` import from the clone's
    phases/ and plans/ (from outside it and from its root, where pytest runs), and its own
    tests of the phases pass there."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    env = clean_env(tmp_path / "venv")

    def git(*args: str, cwd: Path = tmp_path) -> str:
        done = run(["git", *args], cwd, env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    git("-c", "core.symlinks=false", "clone", "--quiet", "--no-hardlinks",
        "--config", "core.symlinks=false", str(REPO), str(clone))
    assert git("config", "--get", "core.symlinks", cwd=clone).strip() == "false"
    # Nothing tracked is a symlink: with core.symlinks=false one would be checked out as a
    # small text file holding its target.
    tracked = git("ls-files", "--stage", cwd=clone).splitlines()
    assert [line for line in tracked if line.startswith("120000")] == []

    python = fresh_venv(tmp_path / "venv")
    pip_install(python, "--editable", str(clone), "--editable", str(clone / "simulator"),
                cwd=tmp_path, env=env)
    for cwd in (tmp_path, clone):
        found = probe(python, cwd, env)
        assert Path(str(found["migrator"])) == clone / "migrator" / "__init__.py", found
        assert Path(str(found["phases"])) == clone / "phases" / "__init__.py", found
        assert Path(str(found["plans"])) == clone / "plans", found
        if cwd == tmp_path:  # (from the clone's root its own phases/ folder is on the path)
            assert found["top-level phases"] is None and found["top-level plans"] is None

    tests = run([str(python), "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                 "tests/planning/test_phases.py",
                 "tests/cli/test_fresh_venv.py::test_the_suite_imports_phases_and_plans_from_"
                 "this_checkout"], clone, env)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert re.search(r"^\d+ passed", tests.stdout.splitlines()[-1]), tests.stdout[-500:]
