"""The collection lingbot.fleet and the CLI wheel, built once per session from this tree.

Everything here runs without this repository's ansible.cfg: commands get an environment
without ANSIBLE_CONFIG and run in a temporary directory, as for someone who installed
the collection with ansible-galaxy or the wheel with pip.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def builder() -> ModuleType:
    """collection/build.py, imported as a module."""
    spec = importlib.util.spec_from_file_location(
        "collection_build", REPO_ROOT / "collection" / "build.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def clean_environment(**extra: str) -> dict[str, str]:
    """os.environ without any Ansible setting of this repository (or of the caller), and
    without a PYTHONPATH that would put this checkout's package before an installed one."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("ANSIBLE_") and key != "PYTHONPATH"
    }
    environment["PATH"] = os.pathsep.join([str(BIN), environment.get("PATH", "")])
    environment.update(extra)
    return environment


def run(argv: list[str], cwd: Path, env: Mapping[str, str], timeout_s: float = 300):
    done = subprocess.run(
        argv, capture_output=True, text=True, cwd=cwd, env=dict(env), check=False, timeout=timeout_s
    )
    return done


@dataclass(frozen=True)
class Built:
    tree: Path  # the built collection (ansible_collections/lingbot/fleet)
    tarball: Path
    collections_dir: Path  # an empty collections path the tarball was installed into
    installed: Path  # <collections_dir>/ansible_collections/lingbot/fleet
    workdir: Path  # a directory with no ansible.cfg

    def environment(self, **extra: str) -> dict[str, str]:
        return clean_environment(ANSIBLE_COLLECTIONS_PATH=str(self.collections_dir), **extra)


@pytest.fixture(scope="session")
def built_collection(tmp_path_factory: pytest.TempPathFactory) -> Built:
    build = builder()
    output = tmp_path_factory.mktemp("collection-build")
    tarball = build.build_collection(REPO_ROOT, output)
    collections_dir = tmp_path_factory.mktemp("collections")
    workdir = tmp_path_factory.mktemp("workdir")
    done = run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "install",
            "-p",
            str(collections_dir),
            str(tarball),
        ],
        workdir,
        clean_environment(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    installed = collections_dir / "ansible_collections" / "lingbot" / "fleet"
    return Built(
        output / "ansible_collections" / "lingbot" / "fleet",
        tarball,
        collections_dir,
        installed,
        workdir,
    )


@dataclass(frozen=True)
class WheelVenv:
    wheel: Path
    venv: Path

    @property
    def cli(self) -> Path:
        return self.venv / "bin" / "lingbot-fleet"


def checkout_copy(destination: Path) -> Path:
    """The files of this checkout a commit would hold (tracked, or new and not ignored),
    copied to ``destination``: what a clone or a git URL gives, without build outputs."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if not source.is_file():  # deleted in the working tree, not yet committed
            continue
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return destination


@pytest.fixture(scope="session")
def wheel_venv(built_collection: Built, tmp_path_factory: pytest.TempPathFactory) -> WheelVenv:
    """The wheel of `make wheel` (the package's standard build, pip wheel of a copy of this
    checkout), installed with its dependencies into a fresh virtualenv."""
    source = checkout_copy(tmp_path_factory.mktemp("wheel-source"))
    dist = tmp_path_factory.mktemp("dist")
    venv = tmp_path_factory.mktemp("wheel-venv")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    done = run(
        [*pip, "wheel", "--no-deps", "-q", "-w", str(dist), str(source)],
        built_collection.workdir,
        clean_environment(),
        timeout_s=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [wheel] = dist.glob("lingbot_fleet-*.whl")
    for argv in (
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)],
    ):
        done = run(argv, built_collection.workdir, clean_environment(), timeout_s=600)
        assert done.returncode == 0, done.stdout + done.stderr
    return WheelVenv(wheel, venv)
