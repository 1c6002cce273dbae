"""The lingbot_service action and the whole role, run by ansible-playbook on localhost."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import plan_support
import pytest
from service_support import ROLE, run_playbook, save, saved

from lingbot_fleet.controller.playbook_run import PlaybookRun
from lingbot_fleet.plan import build_plan

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


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def node_root(tmp_path: Path) -> Path:
    """A node root with numactl and a 32-layer model; the module only reads it in check mode."""
    root = tmp_path / "root"
    executable(root / "usr" / "bin" / "numactl")
    (root / "srv" / "model").mkdir(parents=True, exist_ok=True)
    (root / "srv" / "model" / "config.json").write_text('{"num_hidden_layers": 32}\n')
    return root


def service_tasks(
    tmp_path: Path, facts: dict[str, Any], **service_args: Any
) -> list[dict[str, Any]]:
    """Facts, then the lingbot_service action on a temp root; saves its result and the fact."""
    args = {
        "root": str(node_root(tmp_path)),
        "model_path": "/srv/model",
        "user": "root",
        "group": "root",
        "device_groups": [],
        "verify_units": False,
        "config_overrides": "{{ lingbot_service_config_overrides | default({}) }}",
        **service_args,
    }
    return [
        {"name": "Set the facts", "fake_facts": {"facts": facts}},
        {"name": "Plan and converge", "lingbot_service": args, "register": "planned"},
        save("planned", tmp_path),
        save("lingbot_plan", tmp_path),
    ]


def run_service(
    tmp_path: Path,
    library: Path,
    facts: dict[str, Any],
    variables: dict[str, Any] | None = None,
) -> PlaybookRun:
    # Check mode: the action runs the module on this machine, which must not be changed.
    return run_playbook(
        tmp_path, service_tasks(tmp_path, facts), variables=variables, check=True, library=[library]
    )


def test_action_plans_from_facts_and_probe_as_build_plan_does(
    tmp_path: Path, fake_facts_library: Path
) -> None:
    facts = lab_facts("a6000-phb")
    done = run_service(tmp_path, fake_facts_library, facts)
    assert done.rc == 0, done.stdout
    plan = saved("lingbot_plan", tmp_path)
    planned = saved("planned", tmp_path)
    expected = build_plan(facts["lingbot_gpu"], facts["lingbot_probe"], {"model_num_layers": 32})
    assert plan == expected
    assert planned["plan"] == expected
    assert planned["changed"] is True
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
    assert not (tmp_path / "root" / "etc").exists()


def test_action_reads_the_policy_variables(tmp_path: Path, fake_facts_library: Path) -> None:
    done = run_service(
        tmp_path,
        fake_facts_library,
        lab_facts("a6000-phb"),
        variables={"lingbot_service_p2p_min_gbytes_per_s": 30, "lingbot_service_base_port": 9100},
    )
    assert done.rc == 0, done.stdout
    first, second = saved("lingbot_plan", tmp_path)["instances"]
    assert (first["name"], first["gpus"], first["port"]) == ("numa0-1", [0], 9100)
    assert (second["name"], second["gpus"], second["port"]) == ("numa0-2", [1], 9101)
    assert first["peer_access_threshold_gbytes_per_s"] == 30.0


def test_action_types_policy_variables_given_as_text(
    tmp_path: Path, fake_facts_library: Path
) -> None:
    done = run_service(
        tmp_path,
        fake_facts_library,
        lab_facts("a6000-phb"),
        variables={"lingbot_service_base_port": "9100"},
    )
    assert done.rc == 0, done.stdout
    assert saved("lingbot_plan", tmp_path)["instances"][0]["port"] == 9100
    done = run_service(
        tmp_path,
        fake_facts_library,
        lab_facts("a6000-phb"),
        variables={"lingbot_service_base_port": "nine"},
    )
    assert done.rc == 2
    [failure] = done.failed_tasks("localhost")
    assert failure.result["msg"].startswith(
        "cannot plan LingBot for this host: argument 'lingbot_service_base_port' is of type"
    )


def test_action_passes_the_link_findings(tmp_path: Path, fake_facts_library: Path) -> None:
    facts = lab_facts("a6000-phb")
    bus_id = facts["lingbot_gpu"]["gpus"][1]["bus_id"]
    finding = {"code": "LINK_DOWNGRADED", "severity": "critical", "subject": bus_id}
    done = run_service(tmp_path, fake_facts_library, {**facts, "lingbot_link_findings": [finding]})
    assert done.rc == 0, done.stdout
    plan = saved("lingbot_plan", tmp_path)
    assert plan == build_plan(
        facts["lingbot_gpu"], facts["lingbot_probe"], {"model_num_layers": 32}, [finding]
    )
    assert [instance["gpus"] for instance in plan["instances"]] == [[0]]


def test_action_h100_gets_one_instance_per_numa_node(
    tmp_path: Path, fake_facts_library: Path
) -> None:
    done = run_service(tmp_path, fake_facts_library, lab_facts("h100-sxm-nvswitch"))
    assert done.rc == 0, done.stdout
    instances = saved("lingbot_plan", tmp_path)["instances"]
    assert [(i["name"], i["numa_node"], i["gpus"], i["port"]) for i in instances] == [
        ("numa0", 0, [0, 1, 2, 3], 8000),
        ("numa1", 1, [4, 5, 6, 7], 8001),
    ]


def test_action_shows_the_plan_findings_as_warnings(
    tmp_path: Path, fake_facts_library: Path
) -> None:
    done = run_service(
        tmp_path,
        fake_facts_library,
        lab_facts("h100-sxm-nvswitch"),
        variables={"lingbot_service_max_instances": 1},
    )
    assert done.rc == 0, done.stdout
    [finding] = saved("lingbot_plan", tmp_path)["findings"]
    assert finding["code"] == "PLAN_GPUS_IDLE"
    assert "[WARNING]: PLAN_GPUS_IDLE: " in done.stdout


def test_action_refuses_a_bad_override(tmp_path: Path, fake_facts_library: Path) -> None:
    done = run_service(
        tmp_path,
        fake_facts_library,
        lab_facts("a6000-phb"),
        variables={"lingbot_service_config_overrides": {"debug_mode": "on", "color": 1}},
    )
    assert done.rc == 2
    assert (
        "lingbot_service_config_overrides would make config.yaml invalid (nothing was written)"
        in done.stdout
    )
    assert "instance main: override debug_mode: must be true or false, got str 'on'" in done.stdout
    assert "instance main: override color: unknown key 'color'" in done.stdout


def test_action_without_facts_says_which_role_to_run(tmp_path: Path) -> None:
    done = run_playbook(tmp_path, [{"name": "Plan", "lingbot_service": {}}])
    assert done.rc == 2
    [failure] = done.failed_tasks("localhost")
    assert failure.result["msg"] == (
        "no GPU facts for this host (ansible_facts.lingbot_gpu); run the gpu_facts role "
        "before planning"
    )


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
    (model / "config.json").write_text('{"num_hidden_layers": 4}\n')
    facts = lab_facts("a6000-phb")
    # gpu_facts found numactl: the install task is skipped without touching the node.
    facts["lingbot_gpu"]["host"] = {"numactl_path": str(numactl)}
    tasks = [
        {"name": "Set the facts", "fake_facts": {"facts": facts}},
        {"name": "Run the role", "ansible.builtin.include_role": {"name": "lingbot_service"}},
        save("lingbot_service_result", tmp_path),
    ]
    variables = {
        "lingbot_service_numactl": str(numactl),
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
    assert done.rc == 0, done.stdout
    # One remote module call: the argument check runs on the controller, numactl is there.
    assert [(t.action, t.outcome) for t in done.results("localhost")] == [
        ("fake_facts", "ok"),
        ("ansible.builtin.include_role", "ok"),
        ("ansible.builtin.validate_argument_spec", "ok"),
        ("ansible.builtin.package", "skipped"),
        ("lingbot_service", "ok"),
        ("ansible.builtin.copy", "ok"),
    ]
    for line in (
        "+++ after: /etc/lingbot/main/config.yaml",
        "+debug_mode: true",
        "+++ after: /etc/systemd/system/lingbot@.service",
        "+++ after: /etc/systemd/system/lingbot@main.service.d/10-lingbot-fleet-plan.conf",
        f"+ExecStart={numactl} --cpunodebind=0 --membind=0 /usr/bin/python3 -m lingbot "
        f"--config /etc/lingbot/main/config.yaml --model-path {model} --gpus 0,1 "
        "--peer-access-threshold 25 --host 127.0.0.1 --port 8000",
    ):
        assert line in done.stdout.splitlines()
    result = saved("lingbot_service_result", tmp_path)
    assert result["plan"] == build_plan(
        facts["lingbot_gpu"], facts["lingbot_probe"], {"model_num_layers": 4}
    )
    assert result["changed"] is True
    assert result["started"] == ["main"]
    assert result["readiness"] == {}
    assert "would create the system user lingbot" in result["actions"]
    assert not Path("/etc/lingbot").exists()
    assert not Path("/etc/systemd/system/lingbot@.service").exists()
