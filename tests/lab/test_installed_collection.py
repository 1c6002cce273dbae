"""The collection lingbot.fleet as users install it: built from this tree, installed with
ansible-galaxy into an empty collections path, run with no ansible.cfg of this repository.
It converges a lab node, the second run changes nothing, and the wheel's CLI audits it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from lab_support import recap

from lingbot_fleet.controller.playbook_run import run_playbook
from lingbot_fleet.lab import layout

pytestmark = pytest.mark.lab
PROFILE = "a6000-phb"


def _builder():
    path = layout.REPO_ROOT / "collection" / "build.py"
    spec = importlib.util.spec_from_file_location("collection_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def installed_collection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tarball installed into an empty collections path; the environment points at it."""
    build = _builder()
    tarball = build.build_collection(layout.REPO_ROOT, tmp_path / "build")
    collections_dir = tmp_path / "collections"
    build.install_tarball(tarball, collections_dir)
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(collections_dir))
    monkeypatch.chdir(workdir)  # no ansible.cfg here
    return collections_dir / "ansible_collections" / "lingbot" / "fleet"


def test_collection_converges_a_lab_node_idempotently(booted_lab, installed_collection, tmp_path):
    spec = booted_lab.node(PROFILE)
    site = installed_collection / "playbooks" / "site.yml"
    first = run_playbook(site, inventory=layout.LAB_INVENTORY, limit=spec.name, timeout_s=900)
    assert first.rc == 0, first.stdout[-4000:]
    assert recap(first, spec.name)["failed"] == 0
    again = run_playbook(site, inventory=layout.LAB_INVENTORY, limit=spec.name, timeout_s=900)
    assert again.rc == 0, again.stdout[-4000:]
    assert recap(again, spec.name)["changed"] == 0, again.stdout[-4000:]
    assert booted_lab.run(spec, "systemctl is-active lingbot@main").stdout.strip() == "active"

    # The CLI, pip-installed from this tree into a fresh virtualenv (its wheel carries the
    # collection), audits the node with the collection it carries.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(layout.REPO_ROOT)], check=True, timeout=600
    )
    report = tmp_path / "report"
    audit = [str(venv / "bin" / "lingbot-fleet"), "audit", "-i", str(layout.LAB_INVENTORY)]
    done = subprocess.run(
        [*audit, "-l", spec.name, "--report-dir", str(report)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    [node] = json.loads((report / "fleet.json").read_text())["nodes"]
    assert node["host"] == spec.name
    assert node["status"] in ("ok", "findings")
    assert "LINGBOT_CONFIG_DRIFT" not in {finding["code"] for finding in node["findings"]}
