"""Malformed kernel parameters, grub files, plan inputs, overrides, run ids, paths and unit
values: each refused by the toolkit's own function with the exact message (these are the
functions the modules and plugins call before anything is written)."""

from __future__ import annotations

import pytest
from malformed_support import NAME_RULE, VALUE_RULE

from lingbot_fleet.boot import cmdline, grub
from lingbot_fleet.lingbot import config as lingbot_config
from lingbot_fleet.lingbot import layout as lingbot_layout
from lingbot_fleet.monitor import config as monitor_config
from lingbot_fleet.monitor import units as monitor_units
from lingbot_fleet.node import generations
from lingbot_fleet.plan import PlanInputError, build_plan

GENERATIONS_DIR = generations.DEFAULT_GENERATIONS_DIR
FACTS = {"schema_version": 1, "gpus": []}
INSTANCE_RULE = (
    "cannot be a systemd instance; use letters, digits, '_', '.', '-' (at most 64, not "
    "starting with '_', '.' or '-')"
)

CASES = [
    (
        "yaml boolean value",
        lambda: cmdline.build_policy({"iommu": "pt", "intel_iommu": True}, []),
        cmdline.PolicyError,
        "present: kernel parameter 'intel_iommu' has the value True, not a string (YAML reads "
        'on, off, yes and no as booleans); quote it, e.g. intel_iommu: "on"',
    ),
    (
        "non-ascii space in an absent value",
        lambda: cmdline.build_policy({}, ["pci=noacpi\u00a0x"]),
        cmdline.PolicyError,
        f"absent: value of kernel parameter 'pci' ('noacpi\\xa0x') contains '\\xa0'; {VALUE_RULE}",
    ),
    (
        "None in the absent list",
        lambda: cmdline.build_policy({}, [None]),
        cmdline.PolicyError,
        "absent[0] is None, not a string; give each parameter to remove as name or name=value",
    ),
    (
        "present and absent at once",
        lambda: cmdline.build_policy({"iommu": "pt"}, ["iommu=pt"]),
        cmdline.PolicyError,
        "kernel parameter 'iommu=pt' is asked to be absent while 'iommu=pt' is asked to be "
        "present; remove it from one of the two lists.",
    ),
    (
        "blank in a name",
        lambda: cmdline.build_policy({"io mmu": "pt"}, []),
        cmdline.PolicyError,
        f"present: malformed kernel parameter name 'io mmu'; {NAME_RULE}",
    ),
    (
        "blank in a value",
        lambda: cmdline.build_policy({"iommu": "p t"}, []),
        cmdline.PolicyError,
        f"present: value of kernel parameter 'iommu' ('p t') contains ' '; {VALUE_RULE}",
    ),
    (
        "empty absent entry",
        lambda: cmdline.build_policy({}, [""]),
        cmdline.PolicyError,
        f"absent: malformed kernel parameter name ''; {NAME_RULE}",
    ),
    (
        "unclosed quote in /etc/default/grub",
        lambda: grub.parse_grub_file("/etc/default/grub", 'GRUB_CMDLINE_LINUX="quiet\n'),
        grub.GrubParseError,
        "/etc/default/grub:1: unbalanced double quote: the quote opened here is never closed. "
        "Fix: close the quote.",
    ),
    (
        "facts that are not a mapping",
        lambda: build_plan("x", None, {}),
        PlanInputError,
        "facts: expected the gpu_facts document (a mapping)",
    ),
    (
        "facts of another schema",
        lambda: build_plan({}, None, {}),
        PlanInputError,
        "facts: schema_version is None, the planner reads 1; gather the facts again with this "
        "toolkit's gpu_facts",
    ),
    (
        "a truncated probe",
        lambda: build_plan(FACTS, {"gpus": "x"}, {}),
        PlanInputError,
        "probe: schema_version is None, the planner reads 1; run this toolkit's p2p_probe again",
    ),
    (
        "facts whose gpus hold a number",
        lambda: build_plan({"schema_version": 1, "gpus": [1]}, None, {}),
        PlanInputError,
        "facts: gpus[0] is 1, not a gpu entry; gather the facts again with gpu_facts",
    ),
    (
        "facts with a GPU index that is text",
        lambda: build_plan({"schema_version": 1, "gpus": [{"index": "0"}]}, None, {}),
        PlanInputError,
        "facts: gpus[0].index is '0', not a GPU index; gather the facts again with gpu_facts",
    ),
    (
        "facts whose schema version is a boolean",
        lambda: build_plan({"schema_version": True, "gpus": []}, None, {}),
        PlanInputError,
        "facts: schema_version is True, the planner reads 1; gather the facts again with this "
        "toolkit's gpu_facts",
    ),
    (
        "a probe whose gpus are text",
        lambda: build_plan(FACTS, {"schema_version": 1, "gpus": "x"}, {}),
        PlanInputError,
        "probe: gpus is 'x', not a list; run this toolkit's p2p_probe again",
    ),
    (
        "a probe whose pairs hold text",
        lambda: build_plan(FACTS, {"schema_version": 1, "gpus": [], "pairs": ["0->1"]}, {}),
        PlanInputError,
        "probe: pairs[0] is '0->1', not a pair entry; run this toolkit's p2p_probe again",
    ),
    (
        "a probe with a NaN bandwidth",
        lambda: build_plan(
            FACTS,
            {
                "schema_version": 1,
                "pairs": [
                    {
                        "src": 0,
                        "dst": 1,
                        "p2p_enabled": {"unidirectional_gbytes_per_s": float("nan")},
                    }
                ],
            },
            {},
        ),
        PlanInputError,
        "probe.pairs[0].p2p_enabled.unidirectional_gbytes_per_s is nan, not a measured figure; "
        "run this toolkit's p2p_probe again",
    ),
    (
        "a policy that is a list",
        lambda: build_plan(FACTS, None, ["p2p_min_gbytes_per_s"]),
        PlanInputError,
        "policy: expected a mapping of policy keys, got ['p2p_min_gbytes_per_s']",
    ),
    (
        "an unknown policy key",
        lambda: build_plan(FACTS, None, {"colour": 1}),
        PlanInputError,
        "policy: unknown key 'colour'; known keys: p2p_min_gbytes_per_s, instance_layout, "
        "max_gpus_per_instance, require_same_numa, allow_gpus, exclude_gpus, base_port, "
        "ineligible_finding_severity, host_bandwidth_tie_percent, model_num_layers, baseline, "
        "max_instances, p2p_hysteresis_percent, figure_tolerance_percent",
    ),
    (
        "a negative threshold",
        lambda: build_plan(FACTS, None, {"p2p_min_gbytes_per_s": -1}),
        PlanInputError,
        "policy p2p_min_gbytes_per_s: must be > 0, got -1",
    ),
    (
        "a boolean threshold",
        lambda: build_plan(FACTS, None, {"p2p_min_gbytes_per_s": True}),
        PlanInputError,
        "policy p2p_min_gbytes_per_s: must be a number, got True",
    ),
    (
        "an unknown config override",
        lambda: lingbot_config.build_config({}, {"colour": 1}, 25),
        lingbot_config.ConfigError,
        "override colour: unknown key 'colour'; known keys here: hardware_profile, "
        "load_balancer, kv_cache_strategy, kv_cache_sync_interval_ms, kv_cache_compression, "
        "debug_mode",
    ),
    (
        "an instance name with a slash",
        lambda: lingbot_layout.check_instance_name("a/b"),
        lingbot_layout.LayoutError,
        f"instance name 'a/b' {INSTANCE_RULE}",
    ),
    (
        "an empty instance name",
        lambda: lingbot_layout.check_instance_name(""),
        lingbot_layout.LayoutError,
        f"instance name '' {INSTANCE_RULE}",
    ),
    (
        "a run id that climbs out",
        lambda: generations.check_run_id("../x"),
        generations.GenerationError,
        "run id '../x' is not usable as a directory name; use letters, digits, '_', '-' and '.' "
        "(at most 128), e.g. 20250101T120000Z-4711",
    ),
    (
        "a relative path to record",
        lambda: generations.record_before(GENERATIONS_DIR, "r1", ["etc/x"], "/nonexistent-root"),
        generations.GenerationError,
        "'etc/x' is not a normalized absolute path; give each recorded path as /dir/file",
    ),
    (
        "a path with .. to record",
        lambda: generations.record_before(
            GENERATIONS_DIR, "r1", ["/etc/../x"], "/nonexistent-root"
        ),
        generations.GenerationError,
        "'/etc/../x' is not a normalized absolute path; give each recorded path as /dir/file",
    ),
    (
        "a timer interval with a shell tail",
        lambda: monitor_units.time_span("interval", "5 mins;rm"),
        monitor_units.UnitValueError,
        "interval '5 mins;rm' is not a systemd time span (e.g. 5min, 90s, 1h 30min)",
    ),
    (
        "a relative writable path",
        lambda: monitor_units.systemd_path("state_dir", "relative/x"),
        monitor_units.UnitValueError,
        "state_dir 'relative/x': systemd needs an absolute path",
    ),
    (
        "a writable path with a leading '+'",
        lambda: monitor_units.systemd_path("state_dir", "+/var/lib/x"),
        monitor_units.UnitValueError,
        "state_dir '+/var/lib/x': systemd needs an absolute path",
    ),
    (
        "a writable path with a leading '!'",
        lambda: monitor_units.systemd_path("textfile_dir", "!/var/lib/x"),
        monitor_units.UnitValueError,
        "textfile_dir '!/var/lib/x': systemd needs an absolute path",
    ),
    (
        "a negative timer interval",
        lambda: monitor_units.time_span("interval", "-5s"),
        monitor_units.UnitValueError,
        "interval '-5s' is not a systemd time span (e.g. 5min, 90s, 1h 30min)",
    ),
    (
        "absent given as one string",
        lambda: cmdline.build_policy({}, "pci=noacpi"),
        cmdline.PolicyError,
        "absent is 'pci=noacpi', not a list; give the parameters to remove as a list, e.g. "
        "[pci=noacpi]",
    ),
    (
        "present given as a list",
        lambda: cmdline.build_policy(["iommu=pt"], []),
        cmdline.PolicyError,
        "present is ['iommu=pt'], not a mapping; give the parameters as name: value (a null "
        "value for a bare flag), e.g. {iommu: pt, quiet: null}",
    ),
    (
        "a newline in a writable path",
        lambda: monitor_units.systemd_path("state_dir", "/x\ny"),
        monitor_units.UnitValueError,
        "state_dir '/x\\ny': a unit value cannot hold control characters",
    ),
    (
        "a severity the monitor does not know",
        lambda: monitor_config.parse_config(
            '{"finding_severity": {"MONITOR_NO_PLAN": "fatal"}}', "/etc/lingbot-fleet/monitor.json"
        ),
        monitor_config.MonitorConfigError,
        "configuration /etc/lingbot-fleet/monitor.json: finding_severity.MONITOR_NO_PLAN: 'fatal' "
        "is not a severity; give one of info, warning, error, critical (fix it in "
        "lingbot_fleet_finding_severity)",
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_malformed_input_is_refused_with_the_exact_message(call, error, message) -> None:
    with pytest.raises(error) as refused:
        call()
    assert str(refused.value) == message
