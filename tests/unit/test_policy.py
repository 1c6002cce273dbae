"""The first play's policy check: types, choices, unknown names, contradictions."""

from __future__ import annotations

from pathlib import Path

import pytest

from lingbot_fleet.controller.policy import check_policy, load_role_specs

ROLES = Path(__file__).resolve().parents[2] / "roles"


@pytest.fixture(scope="module")
def specs():
    return load_role_specs(ROLES)


def messages(variables, specs):
    return [str(problem) for problem in check_policy(variables, specs)]


def test_every_role_declares_argument_specs(specs):
    roles = sorted(path.name for path in ROLES.iterdir() if (path / "tasks").is_dir())
    assert sorted(specs) == roles


def test_defaults_and_unrelated_variables_pass(specs):
    assert messages({"ansible_user": "root", "inventory_hostname": "x"}, specs) == []
    assert messages({"kernel_cmdline_reboot": "if_required"}, specs) == []


def test_choice_violation_names_variable(specs):
    problems = messages({"kernel_cmdline_reboot": "always"}, specs)
    assert len(problems) == 1
    assert problems[0].startswith("kernel_cmdline_reboot: ")
    assert "never, if_required" in problems[0]


def test_wrong_type_names_variable(specs):
    problems = messages({"kernel_cmdline_absent": {"pci": "noacpi"}}, specs)
    assert len(problems) == 1
    assert problems[0].startswith("kernel_cmdline_absent: ")


def test_unknown_variable_suggests_closest(specs):
    problems = messages({"kernel_cmdline_rebot": "never"}, specs)
    assert problems == [
        "kernel_cmdline_rebot: unknown variable of role kernel_cmdline "
        "(did you mean kernel_cmdline_reboot? see roles/kernel_cmdline/README.md)"
    ]


def test_present_and_absent_contradict(specs):
    problems = messages(
        {"kernel_cmdline_present": {"iommu": "pt"}, "kernel_cmdline_absent": ["iommu"]}, specs
    )
    assert len(problems) == 1
    assert problems[0].startswith("kernel_cmdline: kernel_cmdline_present/kernel_cmdline_absent:")
    assert "iommu" in problems[0]


def test_example_inventory_is_valid(specs):
    import yaml

    variables = {}
    for path in sorted((ROLES.parent / "inventory/example/group_vars/gpu-nodes").glob("*.yml")):
        variables.update(yaml.safe_load(path.read_text()) or {})
    assert "kernel_cmdline_present" in variables
    assert messages(variables, specs) == []


def test_play_wide_variable_from_the_inventory_is_refused_with_the_fix() -> None:
    from lingbot_fleet.controller.policy import play_wide_problems

    problems = play_wide_problems({"kernel_cmdline_reboot_batch": "10%"}, extra_vars={})
    assert [str(problem) for problem in problems] == [
        "kernel_cmdline_reboot_batch: is set in the inventory, but it is the batch size of the "
        "rolling reboot (provision.yml, rollback.yml), which Ansible reads before any inventory "
        "variable; the inventory value would be ignored. Remove it there and pass it with "
        "-e kernel_cmdline_reboot_batch=<value>"
    ]
    assert (
        play_wide_problems(
            {"kernel_cmdline_reboot_batch": "10%"},
            extra_vars={"kernel_cmdline_reboot_batch": "10%"},
        )
        == []
    )
