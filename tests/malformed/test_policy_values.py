"""Malformed inventory values: each refused by the first play with the exact message.

The policy check runs before any play touches a node, so nothing is written on a node
when it refuses; these cases are the values that reach unit files, environment files,
command lines and the kernel command line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lingbot_fleet.policy import check_policy, load_role_specs

ROLES = Path(__file__).resolve().parents[2] / "roles"
NEWLINE = "holds the control character '\\n' at position"
OWNED_RULE = (
    "a directory the toolkit owns is an absolute, normalized path with a component below the "
    "top level that names the toolkit (holds 'lingbot-fleet'), not under /proc, /sys or /dev, e.g. "
    "/var/lib/lingbot-fleet/generations"
)
NOT_OURS = "is not a directory of the toolkit (the toolkit would create, chmod and prune there)"

CASES = [
    (
        {"lingbot_service_pythonpath": "/opt/lingbot\nExecStartPre=+/bin/sh -c id"},
        f"lingbot_service_pythonpath: {NEWLINE} 12; remove it (values land in unit files and "
        "commands, where a line break starts a new directive)",
    ),
    (
        {"lingbot_service_model_path": "/models/a b"},
        "lingbot_service_model_path: '/models/a b' holds whitespace; give one word (path or name)",
    ),
    (
        {"lingbot_service_model_path": "/models/%h"},
        "lingbot_service_model_path: '/models/%h' holds '%', which systemd expands in unit "
        "files; remove it",
    ),
    (
        {"lingbot_service_python": "+/usr/bin/python3"},
        "lingbot_service_python: '+/usr/bin/python3' starts with '+', which systemd reads as a "
        "command prefix; give the path or name itself",
    ),
    (
        {"lingbot_service_user": "!lingbot"},
        "lingbot_service_user: '!lingbot' starts with '!', which systemd reads as a command "
        "prefix; give the path or name itself",
    ),
    (
        {"lingbot_service_group": "lingbot\u2028x"},
        "lingbot_service_group: holds the control character '\\u2028' at position 7; remove it "
        "(values land in unit files and commands, where a line break starts a new directive)",
    ),
    (
        {"lingbot_service_api_key": "k\r\nLD_PRELOAD=/tmp/x.so"},
        "lingbot_service_api_key: holds the control character '\\r' at position 1; remove it "
        "(values land in unit files and commands, where a line break starts a new directive)",
    ),
    (
        {"lingbot_service_extra_args": ["--verbose", "--x\n--y"]},
        f"lingbot_service_extra_args[1]: {NEWLINE} 3; remove it (values land in unit files and "
        "commands, where a line break starts a new directive)",
    ),
    (
        {"topo_monitor_python": "/usr/bin/python3 -I"},
        "topo_monitor_python: '/usr/bin/python3 -I' holds whitespace; give one word (path or name)",
    ),
    (
        {"topo_monitor_textfile_dir": "/var/lib/node_exporter\x00"},
        "topo_monitor_textfile_dir: holds the control character '\\x00' at position 22; remove "
        "it (values land in unit files and commands, where a line break starts a new directive)",
    ),
    (
        {"generations_dir": "/var/lib/lingbot\tfleet"},
        "generations_dir: holds the control character '\\t' at position 16; remove it (values "
        "land in unit files and commands, where a line break starts a new directive)",
    ),
    (
        {"generations_dir": "/var/lib"},
        f"generations_dir: '/var/lib' {NOT_OURS}; {OWNED_RULE}",
    ),
    ({"generations_dir": "/"}, f"generations_dir: '/' {NOT_OURS}; {OWNED_RULE}"),
    ({"generations_dir": "/tmp"}, f"generations_dir: '/tmp' {NOT_OURS}; {OWNED_RULE}"),
    (
        {"generations_dir": "/etc/lingbot"},
        f"generations_dir: '/etc/lingbot' {NOT_OURS}; {OWNED_RULE}",
    ),
    (
        {"generations_dir": "var/lib/lingbot-fleet"},
        f"generations_dir: 'var/lib/lingbot-fleet' is a relative path; {OWNED_RULE}",
    ),
    (
        {"fleet_audit_generations_dir": "/var/lib/lingbot-fleet/../.."},
        "fleet_audit_generations_dir: '/var/lib/lingbot-fleet/../..' is not normalized ('..', "
        f"'.', '//' or a trailing '/'); {OWNED_RULE}",
    ),
    (
        {"p2p_probe_save_dir": "/proc/lingbot"},
        f"p2p_probe_save_dir: '/proc/lingbot' is on a kernel filesystem; {OWNED_RULE}",
    ),
    (
        {"kernel_cmdline_backup_dir": "/etc/default"},
        f"kernel_cmdline_backup_dir: '/etc/default' {NOT_OURS}; {OWNED_RULE}",
    ),
    (
        {"rollout_gate_probe_save_dir": "/home/ops"},
        f"rollout_gate_probe_save_dir: '/home/ops' {NOT_OURS}; {OWNED_RULE}",
    ),
    (
        {"lingbot_service_model_path": "/models/\u00a0llama"},
        "lingbot_service_model_path: '/models/\\xa0llama' holds whitespace; give one word (path "
        "or name)",
    ),
    (
        {"kernel_cmdline_present": {"iommu": "pt", "intel_iommu": True}},
        "kernel_cmdline: kernel_cmdline_present.intel_iommu is the YAML boolean True (YAML reads "
        'on, off, yes and no as booleans); quote the value, e.g. intel_iommu: "on"',
    ),
    (
        {"kernel_cmdline_absent": ["pci=noacpi", None]},
        "kernel_cmdline: kernel_cmdline_absent[1] is empty; give each parameter to remove as "
        "name or name=value",
    ),
    (
        {"kernel_cmdline_present": {"iommu": "pt\nquiet"}},
        f"kernel_cmdline_present.iommu: {NEWLINE} 2; remove it (values land in unit files and "
        "commands, where a line break starts a new directive)",
    ),
]


@pytest.fixture(scope="module")
def specs():
    return load_role_specs(ROLES)


@pytest.mark.parametrize(("variables", "message"), CASES, ids=[next(iter(c[0])) for c in CASES])
def test_malformed_value_is_refused_with_the_exact_message(variables, message, specs) -> None:
    problems = [str(problem) for problem in check_policy(variables, specs)]
    assert message in problems, problems


def test_every_directory_variable_is_owned_or_declared_shared(specs) -> None:
    """A new directory variable is sorted into one list: the toolkit owns it (checked by
    values.owned_dir) or it is another program's directory the toolkit only puts files in."""
    from lingbot_fleet.policy import OWNED_DIR_VARIABLES, SHARED_DIR_VARIABLES

    directories = {
        name
        for options in specs.values()
        for name, spec in options.items()
        if spec.get("type") == "path" and name.endswith("_dir")
    }
    assert directories == set(OWNED_DIR_VARIABLES) | set(SHARED_DIR_VARIABLES)
    defaults = {name: spec.get("default") for o in specs.values() for name, spec in o.items()}
    assert check_policy({n: defaults[n] for n in OWNED_DIR_VARIABLES}, specs) == []
