"""lingbot_fleet.node.values: what each validator accepts, in what form it returns it, and what it
refuses (the refusals' exact messages are in tests/malformed/test_hostile_values.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lingbot_fleet.node import values


@pytest.mark.parametrize("name", ["lingbot-fleet", "50_lingbot.fleet", "a+b", "x" * 64])
def test_a_plain_file_name_passes(name: str) -> None:
    assert values.file_name(name, "v") == name


@pytest.mark.parametrize(
    "name", ["", "a/b", "/etc/x", "..", ".x", "-x", "x" * 65, "a b", "a\nb", "é", None, 5]
)
def test_a_file_name_with_a_directory_or_odd_characters_is_refused(name: object) -> None:
    with pytest.raises(values.ValueRefusedError) as refused:
        values.file_name(name, "some_variable")
    assert str(refused.value).startswith("some_variable: ")
    assert refused.value.variable == "some_variable"


@pytest.mark.parametrize("command", ["setpci", "/usr/bin/setpci", "/usr/local/sbin/set-pci_2"])
def test_a_program_path_or_name_passes(command: str) -> None:
    assert values.command(command, "v") == command


@pytest.mark.parametrize(
    "command",
    ["", "setpci -v", "/bin/sh\t-c", "bin/setpci", "//usr/bin/x", "/usr/./bin/x", "/a/../b", "/"],
)
def test_a_command_line_or_odd_path_is_refused(command: str) -> None:
    with pytest.raises(values.ValueRefusedError):
        values.command(command, "v")


def test_a_root_owned_program_in_root_owned_folders_passes() -> None:
    if os.geteuid() != 0 or not os.path.exists("/bin/sh"):
        pytest.skip("needs root and /bin/sh")
    assert values.command_file_problem("/bin/sh", "v") is None


def test_a_sticky_folder_such_as_tmp_may_be_writable_by_all(tmp_path: Path) -> None:
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    (sticky / "tool").mkdir()
    program = sticky / "tool" / "run"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    sticky.chmod(0o1777)
    # tmp_path's own folders are the test user's; /tmp is sticky.
    assert values.command_file_problem(str(program), "v") is None
    sticky.chmod(0o777)
    problem = values.command_file_problem(str(program), "v")
    assert problem is not None and f"{sticky} is writable by everyone" in str(problem)


@pytest.mark.parametrize(
    ("value", "checked"),
    [(1, 1), ("2", 2), (" 3 ", 3), ("1%", "1%"), ("100%", "100%"), ("007%", "7%")],
)
def test_a_batch_size_is_a_count_or_a_percentage(value: object, checked: object) -> None:
    assert values.batch_size(value, "v") == checked


@pytest.mark.parametrize(
    "value", [0, -1, "0", "-5", "0%", "101%", "5.5%", "1.5", "", "all", None, True, [2]]
)
def test_a_batch_size_of_every_node_or_nonsense_is_refused(value: object) -> None:
    with pytest.raises(values.ValueRefusedError):
        values.batch_size(value, "v")


@pytest.mark.parametrize(
    "requirement",
    ["nvidia-ml-py", "nvidia-ml-py>=12.535,<14", "nvidia_ml_py==12.535.161", "a >= 1 , != 2.*"],
)
def test_a_project_with_a_version_specifier_passes(requirement: str) -> None:
    assert values.pip_requirement(requirement, "v") == requirement


@pytest.mark.parametrize(
    "requirement",
    [
        "-r x",
        "--index-url=https://x",
        "https://x/y.whl",
        "./local",
        "/tmp/x.tar.gz",
        "x @ https://y",
        "x[extra]",
        "x; python_version>'3'",
        "x>=1 -i https://y",
        "",
        "x" * 201,
    ],
)
def test_a_pip_option_url_path_extra_or_marker_is_refused(requirement: str) -> None:
    with pytest.raises(values.ValueRefusedError):
        values.pip_requirement(requirement, "v")


@pytest.mark.parametrize(
    ("name", "value", "rendered"),
    [
        ("iommu", "pt", "iommu=pt"),
        ("quiet", None, "quiet"),
        ("hugepages", 16, "hugepages=16"),
        ("console", "ttyS0,115200n8", "console=ttyS0,115200n8"),
        ("pci", "realloc=off", "pci=realloc=off"),
        ("nvidia.NVreg_EnableGpuFirmware", "0", "nvidia.NVreg_EnableGpuFirmware=0"),
    ],
)
def test_an_ordinary_kernel_parameter_passes(name: str, value: object, rendered: str) -> None:
    assert values.kernel_parameter(name, value, "v") == rendered


@pytest.mark.parametrize(
    "name", ["init", "rdinit", "rd.break", "rd.shell", "single", "s", "1", "emergency", "rescue"]
)
def test_a_parameter_that_opens_a_root_shell_is_refused_unless_allowed(name: str) -> None:
    with pytest.raises(values.ValueRefusedError) as refused:
        values.kernel_parameter(name, None, "v")
    assert "kernel_cmdline_allow_risky_params" in str(refused.value)
    assert values.kernel_parameter(name, None, "v", allow_risky=[name]) == name


def test_risky_names_compare_with_dashes_and_underscores_alike() -> None:
    with pytest.raises(values.ValueRefusedError):
        values.kernel_parameter("systemd.debug-shell", None, "v")
    allowed = ["systemd.debug-shell"]
    assert values.kernel_parameter("systemd.debug_shell", None, "v", allow_risky=allowed)


def test_removing_a_risky_parameter_is_the_repair_except_the_root_device() -> None:
    assert values.kernel_parameter("init", None, "v", removing=True) == "init"
    assert values.kernel_parameter("rd.break", None, "v", removing=True) == "rd.break"
    with pytest.raises(values.ValueRefusedError):
        values.kernel_parameter("root", None, "v", removing=True)


@pytest.mark.parametrize(
    ("name", "value"),
    [("a b", None), (".x", None), ("x" * 65, None), ("x", "a|b"), ("x", "$(id)"), ("x", "y" * 257)],
)
def test_a_parameter_outside_the_grammar_is_refused(name: str, value: object) -> None:
    with pytest.raises(values.ValueRefusedError):
        values.kernel_parameter(name, value, "v")
