"""The gpu_facts action: a second reading in the same run, with the same options and in the
same boot, answers from the first without a call; anything else reads the node again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from service_support import run_playbook

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "roles" / "gpu_facts" / "library"


def node(tmp_path: Path, boot_id: str = "boot-1") -> Path:
    root = tmp_path / "node"
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text(boot_id + "\n")
    (root / "proc/cmdline").write_text("ro quiet\n")
    return root


def reading(root: Path, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "gpu_facts": {
            "root": str(root),
            "use_nvml": False,
            "nvidia_smi": "/nonexistent/nvidia-smi",
            **extra,
        },
    }


def readings(tmp_path: Path, tasks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    done = run_playbook(tmp_path, tasks, library=[LIBRARY])
    assert done.rc == 0, done.stdout[-3000:]
    return {task.task: task.result for task in done.results("localhost")}


def test_a_second_reading_in_the_same_run_and_boot_makes_no_call(tmp_path: Path) -> None:
    root = node(tmp_path)
    found = readings(
        tmp_path,
        [
            reading(root, "first", reuse_in_run="run-1"),
            reading(root, "same run, options and boot", reuse_in_run="run-1"),
            reading(root, "other options", reuse_in_run="run-1", receipts=True),
            reading(root, "outside a run"),
            reading(root, "another run", reuse_in_run="run-2"),
        ],
    )
    first = found["first"]
    assert first["ansible_facts"]["lingbot_boot_id"] == "boot-1"
    assert first["ansible_facts"]["lingbot_gpu_gathered"]["run_id"] == "run-1"
    assert first["ansible_facts"]["lingbot_gpu_gathered"]["boot_id"] == "boot-1"
    again = found["same run, options and boot"]
    assert again["reused"] is True and "ansible_facts" not in again
    assert again["pynvml_path"] == first["pynvml_path"]
    for name in ("other options", "outside a run", "another run"):
        assert "reused" not in found[name], name
        assert "lingbot_gpu" in found[name]["ansible_facts"], name


def test_a_reboot_in_between_has_the_node_read_again(tmp_path: Path) -> None:
    root = node(tmp_path)
    found = readings(
        tmp_path,
        [
            reading(root, "first", reuse_in_run="run-1"),
            # A reboot, then the new boot id as kernel_cmdline's verification returns it.
            {
                "name": "A reboot",
                "ansible.builtin.shell": f"echo boot-2 > {root}/proc/sys/kernel/random/boot_id",
                "changed_when": True,
            },
            {
                "name": "The new boot seen",
                "ansible.builtin.set_fact": {"cacheable": True, "lingbot_boot_id": "boot-2"},
            },
            reading(root, "after the reboot", reuse_in_run="run-1"),
            reading(root, "again in that boot", reuse_in_run="run-1"),
        ],
    )
    after = found["after the reboot"]
    assert "reused" not in after
    assert after["ansible_facts"]["lingbot_gpu_gathered"]["boot_id"] == "boot-2"
    assert found["again in that boot"]["reused"] is True


def test_a_reading_that_found_no_pynvml_in_the_venv_is_not_reused(tmp_path: Path) -> None:
    root = node(tmp_path)
    venv = tmp_path / "venv"
    found = readings(
        tmp_path,
        [
            reading(root, "first", reuse_in_run="run-1", pynvml_venv=str(venv)),
            reading(root, "second", reuse_in_run="run-1", pynvml_venv=str(venv)),
        ],
    )
    assert found["first"]["pynvml_in_venv"] is False
    assert "reused" not in found["second"]
