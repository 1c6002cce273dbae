"""Malformed inventory values: each refused by the first play with the exact message.

The policy check runs before any play touches a node, so nothing is written on a node
when it refuses; these cases are the values that reach unit files, environment files,
command lines and the kernel command line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lingbot_fleet.controller.policy import check_policy, load_role_specs

ROLES = Path(__file__).resolve().parents[2] / "roles"
NEWLINE = "holds the control character '\\n' at position"
EXPOSED = (
    "lingbot_service: lingbot_service_listen_host is {host}, which serves LingBot beyond this "
    "node, but lingbot_service_api_key is empty, so anyone who reaches the port could use it. "
    "Set lingbot_service_api_key (kept in a vault), or leave lingbot_service_listen_host at "
    "127.0.0.1 (the default)"
)
NOT_A_NAME = (
    "is not a user or group name; use letters, digits, '_' and '-', starting with a letter or "
    "'_', at most 32 characters (e.g. lingbot)"
)


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
        {"lingbot_servce_api_key": "s3cret"},
        "lingbot_servce_api_key: unknown variable, a near miss of a role variable (did you "
        "mean lingbot_service_api_key? see roles/lingbot_service/README.md); as it is, its "
        "value is ignored and lingbot_service_api_key keeps its default. Rename it",
    ),
    (
        {"LINGBOT_SERVICE_LISTEN_HOST": "0.0.0.0"},
        "LINGBOT_SERVICE_LISTEN_HOST: unknown variable, a near miss of a role variable (did you "
        "mean lingbot_service_listen_host? see roles/lingbot_service/README.md); as it is, its "
        "value is ignored and lingbot_service_listen_host keeps its default. Rename it",
    ),
    (
        {"kernl_cmdline_present": {"iommu": "pt"}},
        "kernl_cmdline_present: unknown variable, a near miss of a role variable (did you mean "
        "kernel_cmdline_present? see roles/kernel_cmdline/README.md); as it is, its value is "
        "ignored and kernel_cmdline_present keeps its default. Rename it",
    ),
    (
        {"lingbot_service_listen_host": "0.0.0.0"},
        EXPOSED.format(host="'0.0.0.0'"),
    ),
    (
        {"lingbot_service_listen_host": "10.0.0.5", "lingbot_service_api_key": ""},
        EXPOSED.format(host="'10.0.0.5'"),
    ),
    (
        {"lingbot_service_api_key": {"vault": "lingbot"}},
        "lingbot_service_api_key: is a mapping, not a string; give the key itself as one string "
        '(from a vault), or "" for none',
    ),
    (
        {"lingbot_service_api_key": ["s3cret"]},
        "lingbot_service_api_key: is a list, not a string; give the key itself as one string "
        '(from a vault), or "" for none',
    ),
    (
        {"lingbot_service_api_key": "two words"},
        "lingbot_service_api_key: holds a blank or non-ASCII text; a key is one word of visible "
        "ASCII characters (it goes into an environment file and an HTTP header). Give such a key",
    ),
    (
        {"lingbot_service_api_key": "s3cret", "lingbot_service_health_host": "10.0.0.9"},
        "lingbot_service: lingbot_service_health_host is '10.0.0.9', neither a loopback address "
        "nor lingbot_service_listen_host ('127.0.0.1'): the readiness check and the warm-up "
        "would send lingbot_service_api_key there over plain HTTP. Set "
        "lingbot_service_health_host to 127.0.0.1, or to the address in "
        "lingbot_service_listen_host",
    ),
    (
        {"lingbot_service_listen_host": "0.0.0.0 --verbose"},
        "lingbot_service_listen_host: '0.0.0.0 --verbose' is neither an IP address nor a host "
        "name; give one, e.g. 127.0.0.1 or 10.0.0.5",
    ),
    (
        {"lingbot_service_user": "lingbot.svc"},
        f"lingbot_service_user: 'lingbot.svc' {NOT_A_NAME}",
    ),
    (
        {"lingbot_service_device_groups": ["video", "render,wheel"]},
        f"lingbot_service_device_groups[1]: 'render,wheel' {NOT_A_NAME}",
    ),
    (
        {"lingbot_service_base_port": 70000},
        "lingbot_service_base_port: 70000 is not a TCP port; give an integer from 1 to 65535 "
        "(with several instances, the last one's port is base port + instances - 1)",
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
    (
        {"lingbot_fleet_finding_severity": {"PCIE_GPU_BEHIND_CHIPSET": "low"}},
        "lingbot_fleet_finding_severity.PCIE_GPU_BEHIND_CHIPSET: 'low' is not a severity; give "
        "one of info, warning, error, critical",
    ),
    (
        {"lingbot_fleet_finding_severity": {"pcie_gpu_behind_chipset": "info"}},
        "lingbot_fleet_finding_severity: 'pcie_gpu_behind_chipset' is not a finding code; give "
        "the code as findings carry it, in UPPER_SNAKE_CASE (e.g. PCIE_WIDTH_BELOW_EXPECTED; "
        "docs/audit.md lists the codes)",
    ),
    (
        {"lingbot_fleet_finding_severity": ["PCIE_GPU_BEHIND_CHIPSET=info"]},
        "lingbot_fleet_finding_severity: is a list, not a mapping; give each finding code with "
        "the severity it should have, e.g. {PROBE_MISSING: warning}, or {} for none",
    ),
]


@pytest.fixture(scope="module")
def specs():
    return load_role_specs(ROLES)


@pytest.mark.parametrize(("variables", "message"), CASES, ids=[next(iter(c[0])) for c in CASES])
def test_malformed_value_is_refused_with_the_exact_message(variables, message, specs) -> None:
    problems = [str(problem) for problem in check_policy(variables, specs)]
    assert message in problems, problems


def test_a_loopback_listener_without_a_key_and_an_exposed_one_with_a_key_pass(specs) -> None:
    assert check_policy({"lingbot_service_listen_host": "127.0.0.1"}, specs) == []
    exposed = {"lingbot_service_listen_host": "0.0.0.0", "lingbot_service_api_key": "s3cret"}
    assert check_policy(exposed, specs) == []
    own = {**exposed, "lingbot_service_listen_host": "10.0.0.5"}
    assert check_policy({**own, "lingbot_service_health_host": "10.0.0.5"}, specs) == []


def test_names_far_from_every_role_variable_are_left_alone(specs) -> None:
    unrelated = {"ansible_user": "root", "inventory_hostname": "node1", "lingbot_plan": {}}
    assert check_policy(unrelated, specs) == []


def test_every_directory_variable_is_owned_or_declared_shared(specs) -> None:
    """A new directory variable is sorted into one list: the toolkit owns it (checked by
    values.owned_dir) or it is another program's directory the toolkit only puts files in."""
    from lingbot_fleet.controller.policy import OWNED_DIR_VARIABLES, SHARED_DIR_VARIABLES

    directories = {
        name
        for options in specs.values()
        for name, spec in options.items()
        if spec.get("type") == "path" and name.endswith("_dir")
    }
    assert directories == set(OWNED_DIR_VARIABLES) | set(SHARED_DIR_VARIABLES)
    defaults = {name: spec.get("default") for o in specs.values() for name, spec in o.items()}
    assert check_policy({n: defaults[n] for n in OWNED_DIR_VARIABLES}, specs) == []
