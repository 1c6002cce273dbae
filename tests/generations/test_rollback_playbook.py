"""playbooks/rollback.yml on localhost, over generations whose files live in a temp dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lingbot_fleet import generations as gen

REPO = Path(__file__).resolve().parents[2]


def playbook(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        json.dumps(
            {
                "gpu-nodes": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                        }
                    }
                }
            }
        )
    )
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        }
    )
    argv = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        str(inventory),
        "playbooks/rollback.yml",
        "-e",
        f"generations_dir={tmp_path / 'generations'}",
        *extra,
    ]
    return subprocess.run(
        argv, check=False, env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )


def provisioned(tmp_path: Path) -> Path:
    config = tmp_path / "etc" / "app.conf"
    config.parent.mkdir()
    config.write_text("original\n")
    generations_dir = str(tmp_path / "generations")
    gen.record_before(generations_dir, "run-1", [str(config)])
    config.write_text("changed\n")
    assert gen.commit(generations_dir, "run-1", {"play": "test"}).generation == 1
    return config


def test_rollback_needs_a_confirmation(tmp_path: Path) -> None:
    config = provisioned(tmp_path)
    done = playbook(tmp_path)
    assert done.returncode == 2
    assert "confirm with -e rollback_confirm=true" in done.stdout
    assert config.read_text() == "changed\n"


def test_check_mode_shows_and_keeps(tmp_path: Path) -> None:
    config = provisioned(tmp_path)
    done = playbook(tmp_path, "--check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"back to generation 0 (undoing 1): write {config}" in done.stdout
    assert config.read_text() == "changed\n"


def test_rollback_restores_and_records_then_rolls_back_again(tmp_path: Path) -> None:
    config = provisioned(tmp_path)
    done = playbook(tmp_path, "-e", "rollback_confirm=true")
    assert done.returncode == 0, done.stdout + done.stderr
    assert config.read_text() == "original\n"
    assert gen.generation_numbers(str(tmp_path / "generations")) == [1, 2]
    again = playbook(tmp_path, "-e", "rollback_confirm=true")
    assert again.returncode == 0, again.stdout + again.stderr
    assert config.read_text() == "changed\n"


def test_host_without_generation_fails_clearly(tmp_path: Path) -> None:
    done = playbook(tmp_path, "-e", "rollback_confirm=true")
    assert done.returncode == 2
    assert (
        f"no generation in {tmp_path / 'generations'}: the toolkit has changed nothing on "
        "this node yet" in done.stdout
    )
