"""The role's modules and the lingbot_plan action, run by ansible-playbook on localhost."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import plan_support
import pytest
import yaml
from service_support import ROLE, run_playbook, save, saved

FACTS_MODULE = """#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule({"facts": {"type": "dict", "required": True}}, supports_check_mode=True)
module.exit_json(changed=False, ansible_facts=module.params["facts"])
"""


@pytest.fixture
def fake_facts_library(tmp_path: Path) -> Path:
    library = tmp_path / "library"
    library.mkdir()
    (library / "fake_facts.py").write_text(FACTS_MODULE)
    return library


def lab_facts(profile: str, with_probe: bool = True) -> dict[str, Any]:
    facts, probe = plan_support.lab_inputs(profile)
    return {"lingbot_gpu": facts, **({"lingbot_probe": probe} if with_probe else {})}


def plan_tasks(tmp_path: Path, profile: str, **plan_args: Any) -> list[dict[str, Any]]:
    return [
        {"name": "Set the facts", "fake_facts": {"facts": lab_facts(profile)}},
        {"name": "Plan", "lingbot_plan": plan_args, "register": "planned"},
        save("planned", tmp_path),
        save("lingbot_plan", tmp_path),
    ]


def test_plan_action_reads_facts_and_probe(tmp_path: Path, fake_facts_library: Path) -> None:
    done = run_playbook(tmp_path, plan_tasks(tmp_path, "a6000-phb"), library=[fake_facts_library])
    assert done.returncode == 0, done.stdout + done.stderr
    plan = saved("lingbot_plan", tmp_path)
    assert saved("planned", tmp_path)["changed"] is False
    assert plan["provisional"] is False
    [instance] = plan["instances"]
    assert (instance["name"], instance["gpus"], instance["gpus_argument"]) == (
        "main",
        [0, 1],
        "0,1",
    )
    assert instance["environment"] == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": "GPU-3b5d6f1e-8a2c-4e7b-9d10-2f4a6c8e0b11,"
        "GPU-11540733-53c6-4b27-9b89-a46dfe945aec",
    }


def test_plan_action_reads_the_policy_variables(tmp_path: Path, fake_facts_library: Path) -> None:
    done = run_playbook(
        tmp_path,
        plan_tasks(tmp_path, "a6000-phb"),
        variables={"lingbot_service_p2p_min_gbytes_per_s": 30, "lingbot_service_base_port": 9100},
        library=[fake_facts_library],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [instance] = saved("lingbot_plan", tmp_path)["instances"]
    assert instance["gpus"] == [0]
    assert instance["port"] == 9100
    assert instance["peer_access_threshold_gbytes_per_s"] == 30.0


def test_plan_action_h100_gets_one_instance_per_numa_node(
    tmp_path: Path, fake_facts_library: Path
) -> None:
    done = run_playbook(
        tmp_path, plan_tasks(tmp_path, "h100-sxm-nvswitch"), library=[fake_facts_library]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    instances = saved("lingbot_plan", tmp_path)["instances"]
    assert [(i["name"], i["numa_node"], i["gpus"], i["port"]) for i in instances] == [
        ("numa0", 0, [0, 1, 2, 3], 8000),
        ("numa1", 1, [4, 5, 6, 7], 8001),
    ]


def test_plan_action_refuses_a_bad_override(tmp_path: Path, fake_facts_library: Path) -> None:
    done = run_playbook(
        tmp_path,
        plan_tasks(tmp_path, "a6000-phb"),
        variables={"lingbot_service_config_overrides": {"debug_mode": "on", "color": 1}},
        library=[fake_facts_library],
    )
    assert done.returncode == 2
    assert (
        "lingbot_service_config_overrides would make config.yaml invalid (nothing was written)"
        in done.stdout
    )
    assert "instance main: override debug_mode: must be true or false, got str 'on'" in done.stdout
    assert "instance main: override color: unknown key 'color'" in done.stdout


def test_plan_action_without_facts_says_which_role_to_run(tmp_path: Path) -> None:
    done = run_playbook(tmp_path, [{"name": "Plan", "lingbot_plan": {}}])
    assert done.returncode == 2
    assert (
        "no GPU facts for this host (ansible_facts.lingbot_gpu); run the gpu_facts" in done.stdout
    )


# --- lingbot_config --------------------------------------------------------------


def config_task(path: Path, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    instance = plan_support_instance("a6000-phb")
    return {
        "name": "Write config.yaml",
        "lingbot_config": {
            "path": str(path),
            "config": instance["config"],
            "overrides": overrides or {},
            "peer_access_threshold_gbytes_per_s": 25,
            "header": "managed",
            "mode": "0640",
        },
        "register": "written",
    }


def plan_support_instance(profile: str) -> dict[str, Any]:
    from lingbot_fleet.plan import build_plan

    facts, probe = plan_support.lab_inputs(profile)
    return build_plan(facts, probe, {})["instances"][0]


def test_config_module_writes_once_and_then_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "etc" / "config.yaml"
    target.parent.mkdir()
    tasks = [config_task(target), save("written", tmp_path)]
    first = run_playbook(tmp_path, tasks, variables=role_variables())
    assert first.returncode == 0, first.stdout + first.stderr
    assert saved("written", tmp_path)["changed"] is True
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    text = target.read_text()
    assert text.startswith("# managed\nhardware_profile:\n  gpu_topology:\n")
    assert yaml.safe_load(text)["kv_cache_strategy"] == "p2p_direct"
    second = run_playbook(tmp_path, tasks, variables=role_variables())
    assert second.returncode == 0
    assert saved("written", tmp_path)["changed"] is False
    assert target.read_text() == text


def test_config_module_check_mode_writes_nothing_and_shows_the_diff(tmp_path: Path) -> None:
    target = tmp_path / "config.yaml"
    done = run_playbook(
        tmp_path, [config_task(target), save("written", tmp_path)], check=True, diff=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not target.exists()
    assert saved("written", tmp_path)["changed"] is True
    assert "+kv_cache_strategy: p2p_direct" in done.stdout


def test_config_module_refuses_a_bad_override_before_writing(tmp_path: Path) -> None:
    target = tmp_path / "config.yaml"
    target.write_text("old\n")
    done = run_playbook(tmp_path, [config_task(target, {"kv_cache_sync_interval_ms": "10ms"})])
    assert done.returncode == 2
    assert "not written: the config breaks LingBot's schema" in done.stdout
    assert "override kv_cache_sync_interval_ms: must be an integer, got str '10ms'" in done.stdout
    assert target.read_text() == "old\n"


# --- lingbot_units ---------------------------------------------------------------


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def role_variables() -> dict[str, Any]:
    """The role's defaults and vars, as play variables (templated lazily)."""
    variables = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    variables.update(yaml.safe_load((ROLE / "vars" / "main.yml").read_text()))
    return variables


def units_tasks(
    tmp_path: Path, python: Path, instances: list[dict[str, Any]], numactl: Path | None = None
) -> list[dict[str, Any]]:
    numactl = numactl or executable(tmp_path / "bin" / "numactl")
    return [
        {
            "name": "Write the units",
            "lingbot_units": {
                "unit_dir": str(tmp_path / "units"),
                "template": "{{ lookup('ansible.builtin.template', '%s') }}"
                % (ROLE / "templates" / "lingbot@.service.j2"),
                "instances": instances,
                "launch": {
                    "numactl": str(numactl),
                    "python": str(python),
                    "config_dir": "/etc/lingbot",
                    "model_path": "/var/lib/lingbot/model",
                    "extra_args": ["--batch-size", "8"],
                },
                "header": "# managed",
            },
            "register": "units",
        },
        save("units", tmp_path),
    ]


PHB_DROPIN_LINES = [
    "# managed",
    "# Instance main of the plan (/etc/lingbot/plan.json): GPU 0, 1 (NVML indices, primary "
    "first) on NUMA node 0.",
    "# CUDA_VISIBLE_DEVICES lists their UUIDs in that order, so --gpus 0,1 keeps it.",
    "[Service]",
    "Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID",
    "Environment=CUDA_VISIBLE_DEVICES=GPU-3b5d6f1e-8a2c-4e7b-9d10-2f4a6c8e0b11,"
    "GPU-11540733-53c6-4b27-9b89-a46dfe945aec",
    "ExecStart=",
    "ExecStart={numactl} --cpunodebind=0 --membind=0 {python} -m lingbot --config "
    "/etc/lingbot/main/config.yaml --model-path /var/lib/lingbot/model --gpus 0,1 "
    "--peer-access-threshold 25 --port 8000 --batch-size 8",
]
PHB_DROPIN = "\n".join(PHB_DROPIN_LINES) + "\n"


def test_units_are_verified_written_and_then_left_alone(tmp_path: Path) -> None:
    python = Path(sys.executable)
    tasks = units_tasks(tmp_path, python, [plan_support_instance("a6000-phb")])
    first = run_playbook(tmp_path, tasks, variables=role_variables())
    assert first.returncode == 0, first.stdout + first.stderr
    result = saved("units", tmp_path)
    assert result["changed"] is True
    assert result["template_changed"] is True
    assert result["changed_instances"] == ["main"]
    dropin = tmp_path / "units" / "lingbot@main.service.d" / "10-lingbot-fleet-plan.conf"
    assert dropin.read_text() == PHB_DROPIN.format(
        numactl=tmp_path / "bin" / "numactl", python=python
    )
    template = (tmp_path / "units" / "lingbot@.service").read_text()
    for line in (
        "After=network-online.target nvidia-persistenced.service",
        "Wants=network-online.target nvidia-persistenced.service",
        "User=lingbot",
        "EnvironmentFile=-/etc/lingbot/%i/secrets.env",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "DeviceAllow=char-nvidia-frontend rw",
        "DeviceAllow=char-nvidia-uvm rw",
        "LimitMEMLOCK=infinity",
        "Restart=on-failure",
        "RestartPreventExitStatus=2",
    ):
        assert line in template.splitlines()
    second = run_playbook(tmp_path, tasks, variables=role_variables())
    assert second.returncode == 0
    assert saved("units", tmp_path)["changed"] is False


def test_units_check_mode_writes_nothing(tmp_path: Path) -> None:
    tasks = units_tasks(tmp_path, Path(sys.executable), [plan_support_instance("a6000-phb")])
    done = run_playbook(tmp_path, tasks, variables=role_variables(), check=True, diff=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert saved("units", tmp_path)["changed"] is True
    assert not (tmp_path / "units").exists()
    assert "+ExecStart=" in done.stdout


def test_a_unit_systemd_refuses_is_not_written(tmp_path: Path) -> None:
    missing_numactl = tmp_path / "usr" / "bin" / "numactl"
    done = run_playbook(
        tmp_path,
        units_tasks(
            tmp_path,
            Path(sys.executable),
            [plan_support_instance("a6000-phb")],
            numactl=missing_numactl,
        ),
        variables=role_variables(),
    )
    assert done.returncode == 2
    assert "systemd-analyze verify refused the LingBot units; nothing was written" in done.stdout
    assert f"Command {missing_numactl} is not executable" in done.stdout
    assert not (tmp_path / "units").exists()


def test_units_of_instances_the_plan_dropped_are_pruned(tmp_path: Path) -> None:
    stale = tmp_path / "units" / "lingbot@numa1.service.d" / "10-lingbot-fleet-plan.conf"
    stale.parent.mkdir(parents=True)
    stale.write_text("[Service]\n")
    done = run_playbook(
        tmp_path,
        units_tasks(tmp_path, Path(sys.executable), [plan_support_instance("a6000-phb")]),
        variables=role_variables(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert saved("units", tmp_path)["removed_instances"] == ["numa1"]
    assert not stale.parent.exists()


# --- lingbot_instances -----------------------------------------------------------


def test_instances_lists_what_the_node_has(tmp_path: Path) -> None:
    (tmp_path / "etc" / "lingbot" / "main").mkdir(parents=True)
    (tmp_path / "etc" / "lingbot" / "main" / "config.yaml").write_text("{}\n")
    (tmp_path / "etc" / "lingbot" / "plan.json").write_text("{}\n")
    (tmp_path / "etc" / "lingbot" / "old").mkdir()
    (tmp_path / "etc" / "lingbot" / "old" / "config.yaml").write_text("{}\n")
    units = tmp_path / "units"
    (units / "lingbot@old.service.d").mkdir(parents=True)
    (units / "lingbot@old.service.d" / "10-lingbot-fleet-plan.conf").write_text("[Service]\n")
    (units / "multi-user.target.wants").mkdir()
    (units / "multi-user.target.wants" / "lingbot@gone.service").symlink_to("/nonexistent")
    tasks = [
        {
            "name": "List",
            "lingbot_instances": {
                "config_dir": str(tmp_path / "etc" / "lingbot"),
                "unit_dir": str(units),
                "keep": ["main"],
            },
            "register": "present",
        },
        save("present", tmp_path),
    ]
    done = run_playbook(tmp_path, tasks, variables=role_variables())
    assert done.returncode == 0, done.stdout + done.stderr
    present = saved("present", tmp_path)
    assert sorted(present["instances"]) == ["gone", "main", "old"]
    assert present["stale"] == ["gone", "old"]
    assert present["instances"]["gone"]["enabled"] is True
    assert present["template_present"] is False
    assert present["stale_files"] == [
        str(tmp_path / "etc" / "lingbot" / "old" / "config.yaml"),
        str(units / "lingbot@old.service.d" / "10-lingbot-fleet-plan.conf"),
    ]
    assert json.loads(json.dumps(present["instances"]["main"]["files"])) == [
        str(tmp_path / "etc" / "lingbot" / "main" / "config.yaml")
    ]


# --- the whole role, in check mode -----------------------------------------------


@pytest.mark.skipif(
    os.geteuid() != 0 or Path("/etc/lingbot").exists(),
    reason="needs root (user and group checks) and a host without /etc/lingbot",
)
def test_role_check_mode_shows_every_file_and_writes_nothing(
    tmp_path: Path, fake_facts_library: Path
) -> None:
    numactl = executable(tmp_path / "bin" / "numactl")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}\n")
    tasks = [
        {"name": "Set the facts", "fake_facts": {"facts": lab_facts("a6000-phb")}},
        {"name": "Run the role", "ansible.builtin.include_role": {"name": "lingbot_service"}},
    ]
    variables = {
        "lingbot_service_numactl": str(numactl),
        "lingbot_service_install_numactl": False,
        "lingbot_service_model_path": str(model),
        "lingbot_service_record_generations": False,
        "lingbot_service_config_overrides": {"debug_mode": True},
    }
    os.environ["ANSIBLE_ROLES_PATH"] = str(ROLE.parent)
    try:
        done = run_playbook(
            tmp_path,
            tasks,
            variables=variables,
            check=True,
            diff=True,
            library=[fake_facts_library],
        )
    finally:
        del os.environ["ANSIBLE_ROLES_PATH"]
    assert done.returncode == 0, done.stdout + done.stderr
    for line in (
        "+++ after: /etc/lingbot/main/config.yaml",
        "+debug_mode: true",
        "+++ after: /etc/systemd/system/lingbot@.service",
        "+++ after: /etc/systemd/system/lingbot@main.service.d/10-lingbot-fleet-plan.conf",
        f"+ExecStart={numactl} --cpunodebind=0 --membind=0 /usr/bin/python3 -m lingbot "
        f"--config /etc/lingbot/main/config.yaml --model-path {model} --gpus 0,1 "
        "--peer-access-threshold 25 --port 8000",
    ):
        assert line in done.stdout.splitlines()
    assert not Path("/etc/lingbot").exists()
    assert not Path("/etc/systemd/system/lingbot@.service").exists()
