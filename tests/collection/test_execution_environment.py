"""ansible-builder create makes a build context from execution-environment.yml (building
the image needs a container runtime and is not run here)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from collection_support import BIN, REPO_ROOT, Built, clean_environment, run


def test_ansible_builder_creates_a_build_context(built_collection: Built, tmp_path: Path) -> None:
    # The definition's paths are relative to it: the repository's layout, with the
    # collection as `make collection` leaves it in build/collection.
    shutil.copy2(REPO_ROOT / "execution-environment.yml", tmp_path)
    shutil.copytree(REPO_ROOT / "collection", tmp_path / "collection")
    shutil.copytree(
        built_collection.tree,
        tmp_path / "build" / "collection" / "ansible_collections" / "lingbot" / "fleet",
    )
    done = run(
        [
            str(BIN / "ansible-builder"),
            "create",
            "--context",
            "context",
            "-f",
            "execution-environment.yml",
        ],
        tmp_path,
        clean_environment(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    build = tmp_path / "context" / "_build"
    containerfile = next((tmp_path / "context").glob("[CD]*file")).read_text()
    assert "ansible-galaxy collection install" in containerfile
    assert yaml.safe_load((build / "requirements.yml").read_text())["collections"] == [
        {"name": "/build/lingbot.fleet", "type": "dir"}
    ]
    galaxy = yaml.safe_load((build / "lingbot.fleet" / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"]) == ("lingbot", "fleet")
    assert (build / "lingbot.fleet" / "plugins" / "modules" / "kernel_cmdline.py").is_file()
    assert "nvidia-ml-py" in (build / "requirements.txt").read_text()
    assert "openssh-client" in (build / "bindep.txt").read_text()
