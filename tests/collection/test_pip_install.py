"""`pip install` of a checkout, the way a user installs from a clone or a git URL: the
package's own build (collection/build_backend.py) puts the collection lingbot.fleet into the
wheel, so the installed CLI audits from any directory with the playbooks it carries."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from collection_support import REPO_ROOT, checkout_copy, clean_environment, run

from lingbot_fleet.audit.fleet import EXIT_NODES_FAILED


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A local TCP port that refuses connections: bound, never listening, for the test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_pip_install_of_a_checkout_audits_with_the_collection_it_carries(
    tmp_path: Path, refused_port: int
) -> None:
    source = checkout_copy(tmp_path / "checkout")
    venv = tmp_path / "venv"
    elsewhere = tmp_path / "elsewhere"  # no ansible.cfg, no checkout
    elsewhere.mkdir()
    environment = clean_environment()
    for argv in (
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(source)],
    ):
        done = run(argv, elsewhere, environment, timeout_s=600)
        assert done.returncode == 0, done.stdout + done.stderr
    cli = str(venv / "bin" / "lingbot-fleet")

    listed = run([cli, "playbooks"], elsewhere, environment)
    assert listed.returncode == 0, listed.stderr
    [carried] = venv.glob("lib/python3*/site-packages/lingbot_fleet/_collection")
    playbooks_dir = carried / "ansible_collections" / "lingbot" / "fleet" / "playbooks"
    assert f"wheel\t{playbooks_dir / 'audit.yml'}" in listed.stdout.splitlines()
    assert str(source) not in listed.stdout and str(REPO_ROOT) not in listed.stdout

    node = {"ansible_host": "127.0.0.1", "ansible_port": refused_port}
    inventory = elsewhere / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump({"all": {"children": {"gpu-nodes": {"hosts": {"gone": node}}}}})
    )
    argv = [cli, "audit", "-i", str(inventory), "--report-dir", "report"]
    done = run(argv, elsewhere, environment)
    assert "not installed" not in done.stderr
    assert done.returncode == EXIT_NODES_FAILED, done.stdout + done.stderr
    [record] = json.loads((elsewhere / "report" / "fleet.json").read_text())["nodes"]
    assert (record["host"], record["status"]) == ("gone", "unreachable")
