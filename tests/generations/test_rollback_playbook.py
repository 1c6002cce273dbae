"""playbooks/rollback.yml on localhost, over generations whose files live in a temp dir."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lingbot_fleet.controller.playbook_run import PlaybookRun, run_playbook
from lingbot_fleet.node import generations as gen

REPO = Path(__file__).resolve().parents[2]


def playbook(tmp_path: Path, *extra: str) -> PlaybookRun:
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
    return run_playbook(
        REPO / "playbooks" / "rollback.yml",
        inventory=inventory,
        cmdline=[
            "-e",
            f"generations_dir={tmp_path / 'lingbot-fleet-generations'}",
            # The files these tests record are the inventory's own: restorable as declared.
            "-e",
            json.dumps({"generations_record_paths": [str(tmp_path / "etc")]}),
            *extra,
        ],
        envvars={
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        },
        timeout_s=300,
    )


def rollback_result(done: PlaybookRun) -> dict:
    [task] = done.results("localhost", action="lingbot_generation")
    return dict(task.result)


def provisioned(tmp_path: Path) -> Path:
    config = tmp_path / "etc" / "app.conf"
    config.parent.mkdir()
    config.write_text("original\n")
    generations_dir = str(tmp_path / "lingbot-fleet-generations")
    gen.record_before(generations_dir, "run-1", [str(config)])
    config.write_text("changed\n")
    assert gen.commit(generations_dir, "run-1", {"play": "test"}).generation == 1
    return config


def test_rollback_needs_a_confirmation(tmp_path: Path) -> None:
    config = provisioned(tmp_path)
    done = playbook(tmp_path)
    assert done.rc == 2
    assert "confirm with -e rollback_confirm=true" in done.stdout
    assert config.read_text() == "changed\n"


def test_check_mode_shows_and_keeps(tmp_path: Path) -> None:
    config = provisioned(tmp_path)
    done = playbook(tmp_path, "--check")
    assert done.rc == 0, done.stdout
    result = rollback_result(done)
    assert result["actions"] == [f"would write {config}"]
    assert result["rollback"]["target"] == 0
    assert config.read_text() == "changed\n"


def test_rollback_restores_and_records_then_rolls_back_again(tmp_path: Path) -> None:
    config = provisioned(tmp_path)
    done = playbook(tmp_path, "-e", "rollback_confirm=true")
    assert done.rc == 0, done.stdout
    assert config.read_text() == "original\n"
    assert gen.generation_numbers(str(tmp_path / "lingbot-fleet-generations")) == [1, 2]
    again = playbook(tmp_path, "-e", "rollback_confirm=true")
    assert again.rc == 0, again.stdout
    assert config.read_text() == "changed\n"


def test_host_without_generation_fails_clearly(tmp_path: Path) -> None:
    done = playbook(tmp_path, "-e", "rollback_confirm=true")
    assert done.rc == 2
    assert (
        f"no generation in {tmp_path / 'lingbot-fleet-generations'}: the toolkit has changed "
        "nothing on this node yet" in done.stdout
    )
