"""Hostile values: refused by the policy play AND by the module, lookup or play that uses
them, with the same message, so a role used from another playbook, under `--skip-tags
always`, `--start-at-task` or with `rolespec_validate: false` refuses them too.

Each module case runs the role's module in this process on a temp root (as a role used
without the policy play would run it) and compares a checksum listing of the root before
and after. ``{root}`` in an expected message stands for the temp root.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleError
from malformed_support import checksums, role_module, run_module, write_tree

from lingbot_fleet.controller.playbook_run import run_playbook
from lingbot_fleet.controller.policy import check_policy, load_role_specs
from lingbot_fleet.node import nodefiles

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
GOOD_GRUB = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX=""\n'
NODE = {
    "/proc/cmdline": "BOOT_IMAGE=/vmlinuz ro quiet\n",
    "/etc/os-release": "ID=debian\n",
    "/etc/default/grub": GOOD_GRUB,
    "/etc/default/grub.d": None,
    "/etc/passwd": "root:x:0:0:root:/root:/bin/bash\n",
    "/etc/profile.d": None,
}
FILE_NAME_RULE = (
    "give a file name only: letters, digits, '_', '-', '+' and '.', starting with a letter, "
    "digit or '_', at most 64 characters"
)
COMMAND_RULE = (
    "give the program alone, as an absolute path (/usr/bin/setpci) or a bare name looked up "
    "on the node's PATH (setpci): letters, digits, '_', '-', '+' and '.' between the '/', no "
    "arguments, no '.' or '..' parts"
)
BATCH_RULE = "give a host count of 1 or more, or a percentage from 1% to 100% (e.g. 2 or '25%')"
PIP_RULE = (
    "give a project name with an optional version specifier, e.g. 'nvidia-ml-py>=12.535,<14' "
    "(no pip options, URLs, paths, extras or markers)"
)


def risky(where: str, shown: str, reason: str, name: str, *, removing: bool = False) -> str:
    verb = "removing it" if removing else "it"
    return (
        f"{where}: {shown!r}: {verb} {reason}, so the toolkit refuses it. Remove it; or, if "
        f"the node must boot that way, add {name!r} to kernel_cmdline_allow_risky_params"
    )


@pytest.fixture(scope="module")
def specs() -> dict[str, Any]:
    return load_role_specs(ROLES)


def policy_messages(variables: dict[str, Any], specs: dict[str, Any]) -> list[str]:
    return [str(problem) for problem in check_policy(variables, specs)]


# --- kernel_cmdline: the module itself, no policy play ---------------------------------

# (id, role variables, module arguments, message)
KERNEL_CMDLINE_CASES = [
    (
        "drop-in name that is a path",
        {"kernel_cmdline_dropin_name": "/etc/profile.d/evil"},
        {"dropin_name": "/etc/profile.d/evil"},
        "kernel_cmdline_dropin_name: '/etc/profile.d/evil' holds '/', so it would name a file "
        f"in another directory; {FILE_NAME_RULE}",
    ),
    (
        "drop-in name that climbs out",
        {"kernel_cmdline_dropin_name": "../../profile.d/evil"},
        {"dropin_name": "../../profile.d/evil"},
        "kernel_cmdline_dropin_name: '../../profile.d/evil' holds '/', so it would name a file "
        f"in another directory; {FILE_NAME_RULE}",
    ),
    (
        "drop-in name that is hidden",
        {"kernel_cmdline_dropin_name": ".lingbot"},
        {"dropin_name": ".lingbot"},
        f"kernel_cmdline_dropin_name: '.lingbot' is not a plain file name; {FILE_NAME_RULE}",
    ),
    (
        "drop-in name with a control character",
        {"kernel_cmdline_dropin_name": "lingbot\x1bfleet"},
        {"dropin_name": "lingbot\x1bfleet"},
        f"kernel_cmdline_dropin_name: 'lingbot\\x1bfleet' is not a plain file name; "
        f"{FILE_NAME_RULE}",
    ),
    (
        "init=/bin/sh",
        {"kernel_cmdline_present": {"iommu": "pt", "init": "/bin/sh"}},
        {"present": {"iommu": "pt", "init": "/bin/sh"}},
        risky(
            "kernel_cmdline_present.init",
            "init=/bin/sh",
            "runs another program as root at boot",
            "init",
        ),
    ),
    (
        "rd.break",
        {"kernel_cmdline_present": {"rd.break": None}},
        {"present": {"rd.break": None}},
        risky("kernel_cmdline_present.rd.break", "rd.break", "boots into a root shell", "rd.break"),
    ),
    (
        "single",
        {"kernel_cmdline_present": {"single": None}},
        {"present": {"single": None}},
        risky("kernel_cmdline_present.single", "single", "boots into a root shell", "single"),
    ),
    (
        "S",
        {"kernel_cmdline_present": {"S": None}},
        {"present": {"S": None}},
        risky("kernel_cmdline_present.S", "S", "boots into a root shell", "S"),
    ),
    (
        "systemd.unit=emergency.target",
        {"kernel_cmdline_present": {"systemd.unit": "emergency.target"}},
        {"present": {"systemd.unit": "emergency.target"}},
        risky(
            "kernel_cmdline_present.systemd.unit",
            "systemd.unit=emergency.target",
            "changes what the node boots into",
            "systemd.unit",
        ),
    ),
    (
        "systemd.debug-shell (dashes as underscores)",
        {"kernel_cmdline_present": {"systemd.debug-shell": "1"}},
        {"present": {"systemd.debug-shell": "1"}},
        risky(
            "kernel_cmdline_present.systemd.debug-shell",
            "systemd.debug-shell=1",
            "boots into a root shell",
            "systemd.debug-shell",
        ),
    ),
    (
        "root= to another device",
        {"kernel_cmdline_present": {"root": "/dev/sdb1"}},
        {"present": {"root": "/dev/sdb1"}},
        risky(
            "kernel_cmdline_present.root",
            "root=/dev/sdb1",
            "changes the root file system",
            "root",
        ),
    ),
    (
        "absent root",
        {"kernel_cmdline_absent": ["pci=noacpi", "root"]},
        {"absent": ["pci=noacpi", "root"]},
        risky(
            "kernel_cmdline_absent[1]",
            "root",
            "leaves the kernel without its root file system",
            "root",
            removing=True,
        ),
    ),
    (
        "value outside the grammar",
        {"kernel_cmdline_present": {"console": "ttyS0|x"}},
        {"present": {"console": "ttyS0|x"}},
        "kernel_cmdline_present.console: 'console=ttyS0|x' has a malformed value; a parameter "
        "is name or name=value; a name is letters, digits, '_', '-' and '.' (at most 64), a "
        "value letters, digits and _ . , : = + / @ - (at most 256)",
    ),
]


def kernel_cmdline_args(root: Path, **args: Any) -> dict[str, Any]:
    return {
        "present": {"iommu": "pt"},
        "absent": ["pci=noacpi"],
        "bootloader": "grub_d",
        "update_bootloader": False,
        "backup_dir": "/var/backup",
        "root": str(root),
        **args,
    }


@pytest.mark.parametrize(
    ("variables", "args", "message"),
    [case[1:] for case in KERNEL_CMDLINE_CASES],
    ids=[case[0] for case in KERNEL_CMDLINE_CASES],
)
@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check"])
def test_kernel_cmdline_refuses_in_the_module_and_the_policy_with_one_message(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    specs: dict[str, Any],
    variables: dict[str, Any],
    args: dict[str, Any],
    message: str,
    check_mode: bool,
) -> None:
    assert message in policy_messages(variables, specs)
    root = tmp_path / "node"
    write_tree(root, NODE)
    before = checksums(root)
    module = role_module("kernel_cmdline", "kernel_cmdline")
    result = run_module(
        monkeypatch, module, kernel_cmdline_args(root, **args), check_mode=check_mode
    )
    assert result["failed"], result
    assert result["msg"] == message
    assert checksums(root) == before


def test_the_override_lets_a_named_risky_parameter_through(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, specs: dict[str, Any]
) -> None:
    variables = {
        "kernel_cmdline_present": {"iommu": "pt", "root": "/dev/sdb1"},
        "kernel_cmdline_allow_risky_params": ["root"],
    }
    assert policy_messages(variables, specs) == []
    root = tmp_path / "node"
    write_tree(root, NODE)
    module = role_module("kernel_cmdline", "kernel_cmdline")
    args = kernel_cmdline_args(
        root, present={"iommu": "pt", "root": "/dev/sdb1"}, allow_risky_params=["root"]
    )
    result = run_module(monkeypatch, module, args, check_mode=True)
    assert not result["failed"], result
    assert "root=/dev/sdb1" in result["configured"]


def test_a_dropin_that_is_a_symlink_is_refused_and_its_target_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = tmp_path / "node"
    write_tree(root, {**NODE, "/etc/default/grub.d/lingbot-fleet.cfg": "-> /etc/passwd"})
    before = checksums(root)
    module = role_module("kernel_cmdline", "kernel_cmdline")
    result = run_module(monkeypatch, module, kernel_cmdline_args(root))
    assert result["failed"], result
    assert result["msg"] == (
        "/etc/default/grub.d/lingbot-fleet.cfg is a symbolic link (to /etc/passwd); the "
        "toolkit's drop-in is a regular file it owns, and writing through the link would "
        "change another file as root. Remove the link (or set kernel_cmdline_dropin_name to "
        "another name) and run again. Nothing was written."
    )
    assert checksums(root) == before
    assert (root / "etc/passwd").read_text() == NODE["/etc/passwd"]


def test_nodechanges_never_writes_through_a_link(tmp_path: Path) -> None:
    """The last line of defence under every module: a link where a file is to be written,
    even a dangling one, is refused; its target stays as it was."""
    write_tree(tmp_path, {"/etc/passwd": "root\n", "/etc/x.cfg": "-> /etc/passwd"})
    (tmp_path / "etc/dangling.cfg").symlink_to(tmp_path / "etc/missing")
    before = checksums(tmp_path)
    changes = nodefiles.NodeChanges(check_mode=False, root=str(tmp_path))
    for name in ("/etc/x.cfg", "/etc/dangling.cfg"):
        with pytest.raises(nodefiles.NodeFileError) as refused:
            changes.write_file(name, "x\n")
        assert str(refused.value) == (
            f"{name} is a symbolic link; lingbot-fleet writes only regular files there. "
            "Remove the link and run again"
        )
    assert checksums(tmp_path) == before


# --- pcie_acs: the setpci command ------------------------------------------------------

REDIRECTING_PORT_FACTS = {
    "iommu": {"mode": "passthrough"},
    "gpus": [
        {
            "index": 0,
            "bridges": [
                {
                    "bdf": "0000:18:00.0",
                    "port_type": "switch_downstream",
                    "acs_status": "read",
                    "acs": {
                        "control": "0x001d",
                        "request_redirect": True,
                        "completion_redirect": True,
                    },
                }
            ],
        }
    ],
}


def pcie_acs_args(root: Path, setpci: str) -> dict[str, Any]:
    return {
        "redirect_off_bridges": ["0000:18:00.0"],
        "facts": REDIRECTING_PORT_FACTS,
        "setpci": setpci,
        "verify": False,
        "root": str(root),
    }


@pytest.mark.parametrize(
    ("setpci", "message"),
    [
        (
            "/bin/sh -c 'curl x|sh' x",
            "pcie_acs_setpci: \"/bin/sh -c 'curl x|sh' x\" holds whitespace: arguments or a "
            f"shell command line would run as root; {COMMAND_RULE}",
        ),
        (
            "bin/setpci",
            f"pcie_acs_setpci: 'bin/setpci' is a relative path; {COMMAND_RULE}",
        ),
        (
            "/usr/bin/../../tmp/setpci",
            f"pcie_acs_setpci: '/usr/bin/../../tmp/setpci' is not a plain program path; "
            f"{COMMAND_RULE}",
        ),
        (
            "/usr/bin/setpci\nExecStartPre=/bin/sh",
            "pcie_acs_setpci: '/usr/bin/setpci\\nExecStartPre=/bin/sh' holds whitespace: "
            f"arguments or a shell command line would run as root; {COMMAND_RULE}",
        ),
    ],
)
def test_pcie_acs_refuses_a_setpci_that_is_not_a_program(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    specs: dict[str, Any],
    setpci: str,
    message: str,
) -> None:
    assert message in policy_messages({"pcie_acs_setpci": setpci}, specs)
    root = tmp_path / "node"
    write_tree(root, {"/etc/systemd/system": None})
    before = checksums(root)
    result = run_module(
        monkeypatch, role_module("pcie_acs", "pcie_acs"), pcie_acs_args(root, setpci)
    )
    assert result["failed"], result
    assert result["msg"] == message
    assert checksums(root) == before


@pytest.mark.parametrize(
    ("mode", "folder_mode", "problem"),
    [
        (0o775, 0o755, "{bin}/setpci is writable by its group (mode 0775"),
        (0o757, 0o755, "{bin}/setpci is writable by everyone (mode 0757"),
        (0o755, 0o777, "{bin} is writable by everyone (mode 0777"),
        (0o644, 0o755, None),
    ],
    ids=["group-writable", "world-writable", "folder world-writable", "not executable"],
)
def test_pcie_acs_refuses_a_setpci_others_could_replace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: int, folder_mode: int, problem: Any
) -> None:
    root = tmp_path / "node"
    write_tree(root, {"/etc/systemd/system": None})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    setpci = bin_dir / "setpci"
    setpci.write_text("#!/bin/sh\nexit 0\n")
    setpci.chmod(mode)
    bin_dir.chmod(folder_mode)
    before = checksums(root)
    result = run_module(
        monkeypatch, role_module("pcie_acs", "pcie_acs"), pcie_acs_args(root, str(setpci))
    )
    assert result["failed"], result
    if problem is None:
        assert result["msg"] == (
            f"pcie_acs_setpci: '{setpci}' is not an executable file on this node; give the "
            "program's path"
        )
    else:
        shown = problem.format(bin=bin_dir)
        assert result["msg"].startswith(f"pcie_acs_setpci: '{setpci}' runs as root, but {shown}")
        assert result["msg"].endswith(
            "so another user could replace the program; give a root-owned program in "
            "root-owned directories that only root can write"
        )
    assert checksums(root) == before
    assert os.access(setpci, os.F_OK)


# --- the reboot batch and the pip requirement: the policy and the lookup ---------------

BATCH_CASES = [
    (
        "0",
        "kernel_cmdline_reboot_batch: '0' would put every node in one batch (Ansible's serial "
        f"runs all hosts at once for 0 or less); {BATCH_RULE}",
    ),
    (
        0,
        "kernel_cmdline_reboot_batch: 0 would put every node in one batch (Ansible's serial "
        f"runs all hosts at once for 0 or less); {BATCH_RULE}",
    ),
    (
        -2,
        "kernel_cmdline_reboot_batch: -2 would put every node in one batch (Ansible's serial "
        f"runs all hosts at once for 0 or less); {BATCH_RULE}",
    ),
    ("0%", f"kernel_cmdline_reboot_batch: '0%' is a percentage under 1%; {BATCH_RULE}"),
    ("150%", f"kernel_cmdline_reboot_batch: '150%' is a percentage over 100%; {BATCH_RULE}"),
    ("5.5%", f"kernel_cmdline_reboot_batch: '5.5%' is not a batch size; {BATCH_RULE}"),
    ("all", f"kernel_cmdline_reboot_batch: 'all' is not a batch size; {BATCH_RULE}"),
]
PIP_CASES = [
    (
        "-r https://example.invalid/requirements.txt",
        "gpu_facts_nvml_package: '-r https://example.invalid/requirements.txt' starts with "
        f"'-', which pip reads as an option (pip runs as root); {PIP_RULE}",
    ),
    (
        "https://example.invalid/pynvml.whl",
        "gpu_facts_nvml_package: 'https://example.invalid/pynvml.whl' is not a plain pip "
        f"requirement; {PIP_RULE}",
    ),
    (
        "nvidia-ml-py @ file:///tmp/x",
        f"gpu_facts_nvml_package: 'nvidia-ml-py @ file:///tmp/x' is not a plain pip "
        f"requirement; {PIP_RULE}",
    ),
    (
        "/tmp/nvidia_ml_py.tar.gz",
        f"gpu_facts_nvml_package: '/tmp/nvidia_ml_py.tar.gz' is not a plain pip requirement; "
        f"{PIP_RULE}",
    ),
]


def checked(kind: str, value: Any, variable: str) -> Any:
    from ansible.plugins.loader import lookup_loader

    lookup_loader.add_directory(str(REPO / "plugins" / "lookup"))
    lookup = lookup_loader.get("lingbot_checked")
    assert lookup is not None
    return lookup.run([kind, value], variables={}, variable=variable)[0]


@pytest.mark.parametrize(("value", "message"), BATCH_CASES, ids=[repr(c[0]) for c in BATCH_CASES])
def test_a_batch_of_every_node_is_refused_by_the_policy_and_by_serial(
    specs: dict[str, Any], value: Any, message: str
) -> None:
    assert message in policy_messages({"kernel_cmdline_reboot_batch": value}, specs)
    with pytest.raises(AnsibleError) as refused:
        checked("batch_size", value, "kernel_cmdline_reboot_batch")
    assert refused.value.message == message


@pytest.mark.parametrize(("value", "message"), PIP_CASES, ids=[c[0] for c in PIP_CASES])
def test_a_pip_option_url_or_path_is_refused_by_the_policy_and_the_install_task(
    specs: dict[str, Any], value: str, message: str
) -> None:
    assert message in policy_messages({"gpu_facts_nvml_package": value}, specs)
    with pytest.raises(AnsibleError) as refused:
        checked("pip_requirement", value, "gpu_facts_nvml_package")
    assert refused.value.message == message


def test_good_values_pass_both_checks(specs: dict[str, Any]) -> None:
    variables = {
        "kernel_cmdline_reboot_batch": "25%",
        "gpu_facts_nvml_package": "nvidia-ml-py>=12.535,<14",
        "pcie_acs_setpci": "/usr/sbin/setpci",
        "kernel_cmdline_dropin_name": "50-lingbot-fleet",
        "kernel_cmdline_present": {"iommu": "pt", "pcie_aspm": "off", "hugepages": 16},
        "kernel_cmdline_absent": ["pci=noacpi", "init"],
    }
    assert policy_messages(variables, specs) == []
    assert checked("batch_size", "25%", "kernel_cmdline_reboot_batch") == "25%"
    assert checked("batch_size", "3", "kernel_cmdline_reboot_batch") == 3


# --- real ansible-playbook runs with the policy play skipped ---------------------------


def ansible_run(tmp_path: Path, playbook: Path, *cmdline: str):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("gpu-nodes:\n  hosts:\n    localhost:\n      ansible_connection: local\n")
    return run_playbook(
        playbook,
        inventory=inventory,
        cmdline=["--check", "--skip-tags", "always", *cmdline],
        envvars={
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        },
        timeout_s=300,
    )


def test_provision_refuses_a_batch_of_0_with_the_policy_play_skipped(tmp_path: Path) -> None:
    run = ansible_run(
        tmp_path, REPO / "playbooks" / "provision.yml", "-e", "kernel_cmdline_reboot_batch=0"
    )
    assert run.rc != 0
    assert (
        "kernel_cmdline_reboot_batch: '0' would put every node in one batch (Ansible's serial "
        f"runs all hosts at once for 0 or less); {BATCH_RULE}"
    ) in run.stdout
    assert run.tasks == []  # not one task ran, on any host


def test_the_role_from_another_playbook_refuses_a_dropin_path(tmp_path: Path) -> None:
    playbook = tmp_path / "other.yml"
    playbook.write_text(
        "- hosts: gpu-nodes\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - ansible.builtin.import_role:\n"
        "        name: kernel_cmdline\n"
        "        rolespec_validate: false\n"
    )
    run = ansible_run(tmp_path, playbook, "-e", "kernel_cmdline_dropin_name=/etc/profile.d/evil")
    assert run.rc != 0
    [failed] = run.failed_tasks("localhost")
    assert failed.action == "kernel_cmdline"
    assert failed.result["msg"] == (
        "kernel_cmdline_dropin_name: '/etc/profile.d/evil' holds '/', so it would name a file "
        f"in another directory; {FILE_NAME_RULE}"
    )


def test_the_rollouts_serial_refuses_a_batch_of_0_like_its_batch_check() -> None:
    message = (
        "rollout_batches item 2 (0): a batch needs at least 1 host (Ansible would run every "
        "remaining host at once for 0 or less); use 1 or more, or '100%' for all the rest"
    )
    with pytest.raises(AnsibleError) as refused:
        checked("batch_list", [1, 0], "rollout_batches")
    assert refused.value.message == message
    assert checked("batch_list", [1, "5%", "100%"], "rollout_batches") == [1, "5%", "100%"]


def test_provisions_first_play_refuses_a_batch_of_0(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("gpu-nodes:\n  hosts:\n    localhost:\n      ansible_connection: local\n")
    run = run_playbook(
        REPO / "playbooks" / "provision.yml",
        inventory=inventory,
        cmdline=["--check", "-e", "kernel_cmdline_reboot_batch=-1"],
        envvars={
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        },
        timeout_s=300,
    )
    assert run.rc != 0
    [failed] = run.failed_tasks("localhost")
    assert failed.action == "lingbot_policy_check"
    assert (
        "kernel_cmdline_reboot_batch: '-1' would put every node in one batch (Ansible's serial "
        f"runs all hosts at once for 0 or less); {BATCH_RULE}"
    ) in failed.result["problems"]
    assert [task.task for task in run.tasks] == [failed.task]
