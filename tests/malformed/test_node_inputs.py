"""Malformed files on a node and malformed module arguments, through the modules' own
run_module() on a temp root: each is refused (or, for a saved probe, set aside) with the
exact message, and a checksum listing of the root is the same before and after.

``{root}`` in an expected message stands for the temp root.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import plan_support
import pytest
from malformed_support import (
    NAME_RULE,
    VALUE_RULE,
    checksums,
    role_module,
    run_module,
    write_tree,
)

from lingbot_fleet.gpu.probe_saved import read_saved_probe
from lingbot_fleet.plan import PlanInputError, build_plan
from lingbot_fleet.rollout.batches import BatchSpecError, batch_plan
from lingbot_fleet.rollout.outcome import max_fail_percentage_problem

Runner = Callable[[pytest.MonkeyPatch, Path], list[str]]

# --- grub files and kernel parameters: the kernel_cmdline module ----------------------

GOOD_GRUB = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX=""\n'
NODE = {
    "/proc/cmdline": "BOOT_IMAGE=/vmlinuz ro quiet\n",
    "/etc/os-release": "ID=debian\n",
    "/etc/default/grub": GOOD_GRUB,
    "/etc/default/grub.d": None,
}


def kernel_cmdline(**args: Any) -> Runner:
    def run(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
        module = role_module("kernel_cmdline", "kernel_cmdline")
        arguments = {
            "present": {"iommu": "pt"},
            "absent": ["pci=noacpi"],
            "bootloader": "grub_d",
            "update_bootloader": False,
            "backup_dir": "/var/backup",
            "root": str(root),
            **args,
        }
        result = run_module(monkeypatch, module, arguments)
        assert result["failed"], result
        return [result["msg"]]

    return run


def grub_case(name: str, files: dict[str, Any], message: str) -> tuple:
    return (name, {**NODE, **files}, kernel_cmdline(), [message])


def cmdline_case(name: str, args: dict[str, Any], message: str) -> tuple:
    return (name, NODE, kernel_cmdline(**args), [message])


GRUB_CASES = [
    grub_case(
        "grub: unterminated double quote",
        {"/etc/default/grub": 'GRUB_CMDLINE_LINUX="quiet pci=noacpi\n'},
        "/etc/default/grub:1: unbalanced double quote: the quote opened here is never closed. "
        "Fix: close the quote. Nothing was written.",
    ),
    grub_case(
        "grub: unterminated single quote with CRLF line ends",
        {"/etc/default/grub": "GRUB_DEFAULT=0\r\nGRUB_CMDLINE_LINUX='quiet\r\n"},
        "/etc/default/grub:2: unbalanced single quote: the quote opened here is never closed. "
        "Fix: close the quote. Nothing was written.",
    ),
    grub_case(
        "grub: drop-in with an unterminated quote",
        {"/etc/default/grub.d/50-local.cfg": 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX x\n'},
        "/etc/default/grub.d/50-local.cfg:1: unbalanced double quote: the quote opened here is "
        "never closed. Fix: close the quote. Nothing was written.",
    ),
    grub_case(
        "grub: command substitution in the command line",
        {"/etc/default/grub": 'GRUB_CMDLINE_LINUX="$(cat /etc/cmdline)"\n'},
        "/etc/default/grub:1: GRUB_CMDLINE_LINUX cannot be evaluated safely: its value uses "
        "command substitution or arithmetic ($(cat /etc/cmdline)). Fix: replace it with the "
        "literal parameters. Nothing was written.",
    ),
    grub_case(
        "grub: a trailing backslash after the assignment",
        {"/etc/default/grub": 'GRUB_CMDLINE_LINUX="quiet" \\'},
        "/etc/default/grub:1: GRUB_CMDLINE_LINUX cannot be evaluated safely: the assignment is "
        "followed by '\\' on the same line (a command run with it, or an unquoted value with "
        "blanks). Fix: quote the whole value and keep one assignment per line. Nothing was "
        "written.",
    ),
    grub_case(
        "grub: binary garbage (every byte value)",
        {"/etc/default/grub": bytes(range(1, 256))},
        "/etc/default/grub:2: unbalanced backquote: the command substitution opened here is "
        "never closed. Fix: close it with a backquote. Nothing was written.",
    ),
    grub_case(
        "grub: a NUL byte inside the command line",
        {"/etc/default/grub": 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX="quiet\x00 pci=noacpi"\n'},
        "/etc/default/grub:2: holds a NUL byte (sh stops reading a value there, so grub would "
        "get a different command line than the file shows). Fix: remove the NUL byte. Nothing "
        "was written.",
    ),
    grub_case(
        "grub: a drop-in that is a directory",
        {"/etc/default/grub.d/50-local.cfg/": None},
        "{root}/etc/default/grub.d/50-local.cfg cannot be read (Is a directory); grub's "
        "configuration scripts source it, so move it away or make it a readable regular file. "
        "Nothing was written.",
    ),
    grub_case(
        "grub: /etc/default/grub that is a symlink loop",
        {"/etc/default/grub": "-> grub"},
        "{root}/etc/default/grub cannot be read (Too many levels of symbolic links); grub's "
        "configuration scripts source it, so move it away or make it a readable regular file. "
        "Nothing was written.",
    ),
]

KERNEL_PARAMETER_CASES = [
    cmdline_case(
        "kernel parameter: YAML boolean through the module",
        {"present": {"iommu": "pt", "intel_iommu": True}},
        "present: kernel parameter 'intel_iommu' has the value True, not a string (YAML reads "
        'on, off, yes and no as booleans); quote it, e.g. intel_iommu: "on" Nothing was written.',
    ),
    cmdline_case(
        "kernel parameter: zero-width space in a value",
        {"present": {"iommu": "pt\u200b"}},
        "present: value of kernel parameter 'iommu' ('pt\\u200b') contains '\\u200b'; "
        f"{VALUE_RULE} Nothing was written.",
    ),
    cmdline_case(
        "kernel parameter: a list as the value",
        {"present": {"iommu": ["pt"]}},
        "present: kernel parameter 'iommu' has the value ['pt'], not a string (YAML reads on, "
        'off, yes and no as booleans); quote it, e.g. iommu: "on" Nothing was written.',
    ),
    cmdline_case(
        "kernel parameter: '$' in a value",
        {"present": {"iommu": "$PT"}},
        f"present: value of kernel parameter 'iommu' ('$PT') contains '$'; {VALUE_RULE} "
        "Nothing was written.",
    ),
    cmdline_case(
        "kernel parameter: a name starting with '-'",
        {"present": {"-iommu": "pt"}},
        f"present: malformed kernel parameter name '-iommu'; {NAME_RULE} Nothing was written.",
    ),
    cmdline_case(
        "kernel parameter: an empty value to remove",
        {"absent": ["pci="]},
        "absent: kernel parameter 'pci' has an empty value; write the bare name (pci) for a "
        "flag, or give a value. Nothing was written.",
    ),
    cmdline_case(
        "kernel parameter: a line break in a value",
        {"present": {"iommu": "pt\nquiet"}},
        f"present: value of kernel parameter 'iommu' ('pt\\nquiet') contains '\\n'; {VALUE_RULE} "
        "Nothing was written.",
    ),
]

# --- saved probe documents: the p2p_probe module (read_only) ----------------------------

NO_SAVED_PROBE = (
    "no saved probe result at {root}/probe/latest.json; run the p2p_probe role without "
    "read_only to measure"
)
PROBE = {"schema_version": 1, "timestamp": "2025-01-01T00:00:00Z", "gpus": [], "pairs": []}


def probe_read_only(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
    module = role_module("p2p_probe", "p2p_probe")
    result = run_module(monkeypatch, module, {"read_only": True, "save_dir": str(root / "probe")})
    assert not result["failed"] and result["probe"] is None, result
    # The module's message carries the note that says why the file is not used.
    note = read_saved_probe(root / "probe")[1] or ""
    assert result["msg"].endswith(f" ({note})")
    return [result["msg"].removesuffix(f" ({note})"), note]


def probe_case(name: str, content: Any, problem: str) -> tuple:
    if isinstance(content, dict):
        content = json.dumps(content)  # NaN and Infinity as the bare tokens json reads
    note = (
        f"the saved probe {{root}}/probe/latest.json is not used ({problem}); it counts as no "
        "saved probe and the next probe that saves replaces it"
    )
    return (name, {"/probe/latest.json": content}, probe_read_only, [NO_SAVED_PROBE, note])


NAN = float("nan")
PAIR = {"src": 0, "dst": 1, "p2p_disabled": {"unidirectional_gbytes_per_s": 11.5}}

PROBE_CASES = [
    probe_case(
        "probe: truncated latest.json",
        '{"schema_version": 1, "gpus": [',
        "cannot be read: Expecting value: line 1 column 32 (char 31)",
    ),
    probe_case(
        "probe: empty latest.json",
        "",
        "cannot be read: Expecting value: line 1 column 1 (char 0)",
    ),
    probe_case(
        "probe: latest.json that is not UTF-8",
        b'{"schema_version": 1, "timestamp": "\xff"}',
        "cannot be read: 'utf-8' codec can't decode byte 0xff in position 36: invalid start byte",
    ),
    probe_case(
        "probe: latest.json holding a list",
        "[1, 2]",
        "it holds a JSON list, not a probe document",
    ),
    probe_case(
        "probe: latest.json of schema version 2",
        {**PROBE, "schema_version": 2},
        "schema_version is 2, this toolkit reads 1",
    ),
    probe_case(
        "probe: schema version true",
        {**PROBE, "schema_version": True},
        "schema_version is True, this toolkit reads 1",
    ),
    probe_case(
        "probe: gpus that is a string",
        {**PROBE, "gpus": "0,1"},
        "gpus is '0,1', not a list of entries",
    ),
    probe_case(
        "probe: NaN bandwidth",
        {
            **PROBE,
            "pairs": [{**PAIR, "p2p_disabled": {"unidirectional_gbytes_per_s": float("nan")}}],
        },
        "pairs[0].p2p_disabled.unidirectional_gbytes_per_s is nan",
    ),
    probe_case(
        "probe: infinite latency",
        {**PROBE, "pairs": [{**PAIR, "p2p_enabled": {"latency_ns": float("inf")}}]},
        "pairs[0].p2p_enabled.latency_ns is inf",
    ),
    probe_case(
        "probe: negative host bandwidth",
        {**PROBE, "gpus": [{"index": 0, "h2d_gbytes_per_s": -3.2}]},
        "gpus[0].h2d_gbytes_per_s is -3.2",
    ),
    (
        "probe: latest.json that is a directory",
        {"/probe/latest.json": None},
        probe_read_only,
        [
            NO_SAVED_PROBE,
            "the saved probe {root}/probe/latest.json is not used (cannot be read: [Errno 21] "
            "Is a directory: '{root}/probe/latest.json'); it counts as no saved probe and the "
            "next probe that saves replaces it",
        ],
    ),
]

# --- facts and probe documents handed to the planner --------------------------------------

FACTS = {"schema_version": 1, "gpus": []}


def planner(facts: Any, probe: Any, policy: Any) -> Runner:
    def run(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
        with pytest.raises(PlanInputError) as refused:
            build_plan(facts, probe, policy)
        return [str(refused.value)]

    return run


PLANNER_CASES = [
    (
        "facts: gpus that is a string",
        {},
        planner({"schema_version": 1, "gpus": "0,1"}, None, {}),
        ["facts: missing the gpus list; gather the facts again with gpu_facts"],
    ),
    (
        "facts: schema version as text",
        {},
        planner({"schema_version": "1", "gpus": []}, None, {}),
        [
            "facts: schema_version is '1', the planner reads 1; gather the facts again with "
            "this toolkit's gpu_facts"
        ],
    ),
    (
        "probe: a list handed to the planner",
        {},
        planner(FACTS, [PROBE], {}),
        ["probe: expected the p2p_probe result document (a mapping)"],
    ),
    (
        "probe: schema version 2 handed to the planner",
        {},
        planner(FACTS, {**PROBE, "schema_version": 2}, {}),
        ["probe: schema_version is 2, the planner reads 1; run this toolkit's p2p_probe again"],
    ),
    (
        "policy: NaN threshold",
        {},
        planner(FACTS, None, {"p2p_min_gbytes_per_s": float("nan")}),
        ["policy p2p_min_gbytes_per_s: must be a number, got nan"],
    ),
    (
        "policy: unknown instance layout",
        {},
        planner(FACTS, None, {"instance_layout": "per_gpu"}),
        ["policy instance_layout: must be one of auto, per_numa, single; got 'per_gpu'"],
    ),
    (
        "policy: port out of range",
        {},
        planner(FACTS, None, {"base_port": 70000}),
        ["policy base_port: must be between 1 and 65535, got 70000"],
    ),
    (
        "policy: allow_gpus as one string",
        {},
        planner(FACTS, None, {"allow_gpus": "0,1"}),
        ["policy allow_gpus: must be a list of GPU UUIDs or indices, got '0,1'"],
    ),
]

# --- generation manifests: the lingbot_generation module ----------------------------------

GENERATIONS = "/var/lib/lingbot-fleet/generations"
SHA = "0" * 64
BEFORE = {"exists": True, "mode": "0644", "uid": 0, "gid": 0, "size": 1, "sha256": SHA}


def generation(**args: Any) -> Runner:
    def run(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
        module = role_module("generations", "lingbot_generation")
        result = run_module(monkeypatch, module, {"root": str(root), **args})
        assert result["failed"], result
        return [result["msg"]]

    return run


def manifest(**changes: Any) -> str:
    entry = {"path": "/etc/x", "kind": "other", "before": BEFORE, "after": {"exists": False}}
    document = {"schema": 1, "generation": 1, "files": [entry], **changes}
    return json.dumps(document)


def entry_manifest(**entry: Any) -> str:
    base = {"path": "/etc/x", "kind": "other", "before": BEFORE, "after": {"exists": False}}
    return manifest(files=[{**base, **entry}])


PENDING = f"{GENERATIONS}/pending/r1/manifest.json"
RECORD = generation(action="record", run_id="r1", paths=["/etc/x"])
SHOW = generation(action="show", generation=1)
DAMAGED_OPEN = (
    "{root}" + PENDING + " cannot be read ({problem}): the open generation of run r1 is "
    "damaged. Move {root}" + GENERATIONS + "/pending/r1 away (its files/ hold the saved "
    "copies) and run again"
)
CORRUPTED = (
    "{root}" + GENERATIONS + "/1/manifest.json is corrupted ({problem}); nothing was touched. "
    "Repair or remove that generation, or roll back to another one with -e rollback_to=<n>"
)
OTHER_NUMBER = "it says generation 2, not 1"
NO_PATH = "file entry 0 has no path"
NOT_NORMAL = "is not a normalized absolute path; give each recorded path as /dir/file"


def open_case(name: str, text: str, problem: str) -> tuple:
    files = {GENERATIONS: None, PENDING: text, "/etc/x": "x"}
    return (name, files, RECORD, [DAMAGED_OPEN.replace("{problem}", problem)])


def show_case(name: str, content: Any, problem: str) -> tuple:
    files = {f"{GENERATIONS}/1/manifest.json": content}
    return (name, files, SHOW, [CORRUPTED.replace("{problem}", problem)])


def record_case(name: str, paths: list[str], message: str) -> tuple:
    files = {GENERATIONS: None, "/etc/a": "a", "/etc/d": None}
    return (name, files, generation(action="record", run_id="r1", paths=paths), [message])


GENERATION_CASES = [
    open_case(
        "open manifest: truncated",
        '{"files": [',
        "Expecting value: line 1 column 12 (char 11)",
    ),
    open_case("open manifest: a JSON list", "[]", "it holds a JSON list, not an object"),
    open_case(
        "open manifest: an entry without a path", '{"files": [{}]}', "file entry 0 has no path"
    ),
    open_case(
        "open manifest: entries that are text", '{"files": ["/etc/x"]}', "file entry 0 has no path"
    ),
    record_case("record: a relative path", ["etc/x"], f"'etc/x' {NOT_NORMAL}"),
    record_case("record: '..' in the path", ["/etc/../x"], f"'/etc/../x' {NOT_NORMAL}"),
    record_case(
        "record: a good path, then a path with '..'",
        ["/etc/a", "/etc/../shadow"],
        f"'/etc/../shadow' {NOT_NORMAL}",
    ),
    record_case(
        "record: a line break in the path",
        ["/etc/x\ny"],
        "'/etc/x\\ny' holds a control character (a line break or NUL); give each recorded path "
        "as /dir/file on one line",
    ),
    record_case(
        "record: a directory",
        ["/etc/a", "/etc/d"],
        "/etc/d is not a regular file (a link, directory or device); generations hold regular "
        "files only. Replace it with a file or leave it out of the recorded paths",
    ),
    (
        "record: a run id that climbs out",
        {GENERATIONS: None, "/etc/a": "a"},
        generation(action="record", run_id="../r1", paths=["/etc/a"]),
        [
            "run id '../r1' is not usable as a directory name; use letters, digits, '_', '-' "
            "and '.' (at most 128), e.g. 20250101T120000Z-4711"
        ],
    ),
    show_case(
        "manifest: truncated",
        '{"schema": 1,',
        "Expecting property name enclosed in double quotes: line 1 column 14 (char 13)",
    ),
    show_case(
        "manifest: not UTF-8",
        b'{"schema": 1, "note": "\xff"}',
        "'utf-8' codec can't decode byte 0xff in position 23: invalid start byte",
    ),
    show_case("manifest: a JSON list", "[1]", "not a schema 1 manifest"),
    show_case("manifest: schema 2", manifest(schema=2), "not a schema 1 manifest"),
    show_case(
        "manifest: another generation's", manifest(generation=2), "it says generation 2, not 1"
    ),
    show_case(
        "manifest: files that is text",
        manifest(files="/etc/x"),
        "'files' is '/etc/x', not a list of file entries",
    ),
    show_case(
        "manifest: a relative path",
        entry_manifest(path="etc/x"),
        f"file entry 0: 'etc/x' {NOT_NORMAL}",
    ),
    show_case(
        "manifest: '..' in a path",
        entry_manifest(path="/etc/lingbot/../shadow"),
        f"file entry 0: '/etc/lingbot/../shadow' {NOT_NORMAL}",
    ),
    show_case(
        "manifest: a path that is a number",
        entry_manifest(path=7),
        "file entry 0: 7 is not a path; give each recorded path as /dir/file",
    ),
    show_case(
        "manifest: a saved copy outside the generation",
        entry_manifest(before={**BEFORE, "saved": "../../../../../etc/shadow"}),
        "saved copy '../../../../../etc/shadow' is outside it",
    ),
    show_case(
        "manifest: a saved copy given as an absolute path",
        entry_manifest(before={**BEFORE, "saved": "/etc/shadow"}),
        "saved copy '/etc/shadow' is outside it",
    ),
    show_case(
        "manifest: a mode that is not octal",
        entry_manifest(before={**BEFORE, "mode": "rw-r--r--"}),
        "file entry 0: mode 'rw-r--r--' is not an octal file mode like 0644",
    ),
    show_case(
        "manifest: exists as text",
        entry_manifest(before={"exists": "yes"}),
        "file entry 0: exists is 'yes', not true or false",
    ),
    show_case(
        "manifest: a short checksum",
        entry_manifest(before={**BEFORE, "sha256": "abc"}),
        "file entry 0: sha256 'abc' is not 64 hex digits",
    ),
    show_case(
        "manifest: an entry without its after state",
        json.dumps({"schema": 1, "generation": 1, "files": [{"path": "/etc/x", "before": BEFORE}]}),
        "file entry 0 lacks 'after'",
    ),
    show_case(
        "manifest: a directory in its place",
        None,
        "[Errno 21] Is a directory: '{root}" + GENERATIONS + "/1/manifest.json'",
    ),
]
GENERATION_CASES.append(
    (
        # A node that has run before holds the lock's guard file; a refused rollback adds
        # nothing next to it.
        "rollback: a damaged manifest among those it undoes",
        {
            f"{GENERATIONS}/.lock.guard": "",
            f"{GENERATIONS}/1/manifest.json": "{",
            f"{GENERATIONS}/2/manifest.json": manifest(generation=2, files=[]),
        },
        generation(action="rollback", run_id="r9", rollback_to=0),
        [
            CORRUPTED.replace(
                "{problem}",
                "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
            )
        ],
    )
)

# --- config overrides: the lingbot_service module -------------------------------------------

OVERRIDES_INVALID = (
    "lingbot_service_config_overrides would make config.yaml invalid (nothing was written):\n- "
    "instance main: override "
)
TOP_KEYS = (
    "known keys here: hardware_profile, load_balancer, kv_cache_strategy, "
    "kv_cache_sync_interval_ms, kv_cache_compression, debug_mode"
)
SERVICE_NODE = {"/srv/model/config.json": "{}", "/usr/bin/numactl": "#!/bin/sh\n"}


def service_plan() -> dict[str, Any]:
    facts, probe = plan_support.lab_inputs("a6000-phb")
    return build_plan(facts, probe, {})


def lingbot_service(overrides: dict[str, Any]) -> Runner:
    def run(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
        module = role_module("lingbot_service", "lingbot_service")
        arguments = {
            "plan": service_plan(),
            "root": str(root),
            "model_path": "/srv/model",
            "numactl": "/usr/bin/numactl",
            "config_overrides": overrides,
        }
        result = run_module(monkeypatch, module, arguments)
        assert result["failed"] and result["changed_paths"] == [], result
        return [result["msg"]]

    return run


def override_case(name: str, overrides: dict[str, Any], problem: str) -> tuple:
    return (name, SERVICE_NODE, lingbot_service(overrides), [OVERRIDES_INVALID + problem])


OVERRIDE_CASES = [
    override_case(
        "override: unknown key", {"colour": 1}, f"colour: unknown key 'colour'; {TOP_KEYS}"
    ),
    override_case(
        "override: a key the planner owns (the peer threshold flag)",
        {"peer_access_threshold": 30},
        f"peer_access_threshold: unknown key 'peer_access_threshold'; {TOP_KEYS}",
    ),
    override_case(
        "override: a nested key the planner owns",
        {"hardware_profile": {"gpus": [0, 1]}},
        "hardware_profile.gpus: unknown key 'gpus'; known keys here: gpu_topology, "
        "p2p_threshold_gbps, layer_affinity",
    ),
    override_case(
        "override: U+2028 in a key",
        {"load_balancer\u2028x": "round_robin"},
        "['load_balancer\\u2028x']: unknown key 'load_balancer\\u2028x'; " + TOP_KEYS,
    ),
    override_case(
        "override: text for an integer",
        {"kv_cache_sync_interval_ms": "fast"},
        "kv_cache_sync_interval_ms: must be an integer, got str 'fast'",
    ),
    override_case(
        "override: a boolean for an integer",
        {"kv_cache_sync_interval_ms": True},
        "kv_cache_sync_interval_ms: must be an integer, got boolean true",
    ),
    override_case(
        "override: a negative interval",
        {"kv_cache_sync_interval_ms": -5},
        "kv_cache_sync_interval_ms: must be >= 1, got -5",
    ),
    override_case(
        "override: 'yes' as text for a boolean",
        {"debug_mode": "yes"},
        "debug_mode: must be true or false, got str 'yes'",
    ),
    override_case(
        "override: null for a string",
        {"kv_cache_strategy": None},
        "kv_cache_strategy: must be a string, got null",
    ),
]

# --- unit values and exposure: the lingbot_service module ----------------------------------
# Each refused before anything is written, with lingbot_service_verify_units off (no
# systemd-analyze to catch a second directive), in the order the module checks.

INJECTED = "ExecCondition=+/bin/sh -c id"
NOTHING = " Nothing was written."
UNIT_LINE = "which would end the line in a systemd unit and start a new directive; remove it"


def node_plan(uuid: str | None = None, port: int | None = None) -> dict[str, Any]:
    """The a6000-phb plan, its first GPU's UUID replaced by ``uuid`` in the plan itself: the
    planner refuses such a UUID in the facts, so this is a plan that reached the module some
    other way (a plan file edited by hand)."""
    facts, probe = plan_support.lab_inputs("a6000-phb")
    plan = build_plan(facts, probe, {})
    if uuid is not None:
        old, new = facts["gpus"][0]["uuid"], json.dumps(uuid)[1:-1]
        plan = json.loads(json.dumps(plan).replace(old, new))
    if port is not None:
        plan["instances"][0]["port"] = port
    return plan


def service_refusal(**args: Any) -> Runner:
    def run(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
        module = role_module("lingbot_service", "lingbot_service")
        arguments = {
            "plan": args.pop("plan", None) or service_plan(),
            "root": str(root),
            "model_path": "/srv/model",
            "numactl": "/usr/bin/numactl",
            "verify_units": False,
            **args,
        }
        result = run_module(monkeypatch, module, arguments)
        assert result["failed"] and result.get("changed_paths", []) == [], result
        return [result["msg"]]

    return run


def unit_case(name: str, args: dict[str, Any], message: str) -> tuple:
    return (name, SERVICE_NODE, service_refusal(**args), [message])


UNIT_CASES = [
    unit_case(
        "service: every interface without an API key",
        {"listen_host": "0.0.0.0"},
        "lingbot_service_listen_host is '0.0.0.0', which serves LingBot beyond this node, but "
        "lingbot_service_api_key is empty, so anyone who reaches the port could use it. Set "
        "lingbot_service_api_key (kept in a vault), or leave lingbot_service_listen_host at "
        "127.0.0.1 (the default)." + NOTHING,
    ),
    unit_case(
        "service: the API key as a mapping",
        {"listen_host": "0.0.0.0", "api_key": {"vault": "lingbot"}},
        "lingbot_service_api_key is a mapping, not a string; give the key itself as one string "
        '(from a vault), or "" for none.' + NOTHING,
    ),
    unit_case(
        "service: the API key with a line break",
        {"api_key": "s3cret\nLD_PRELOAD=/tmp/x.so"},
        "lingbot_service_api_key holds the control character '\\n'; a key is one word of "
        "visible ASCII characters (it goes into an environment file and an HTTP header). Give "
        "such a key." + NOTHING,
    ),
    unit_case(
        "service: the API key sent to another host",
        {"api_key": "s3cret", "health_host": "203.0.113.7"},
        "lingbot_service_health_host is '203.0.113.7', neither a loopback address nor "
        "lingbot_service_listen_host ('127.0.0.1'): the readiness check and the warm-up would "
        "send lingbot_service_api_key there over plain HTTP. Set lingbot_service_health_host "
        "to 127.0.0.1, or to the address in lingbot_service_listen_host." + NOTHING,
    ),
    unit_case(
        "service: a user that starts a directive",
        {"user": f"lingbot\n{INJECTED}"},
        f"lingbot_service_user: 'lingbot\\n{INJECTED}' is not a user or group name; use "
        "letters, digits, '_' and '-', starting with a letter or '_', at most 32 characters "
        "(e.g. lingbot)." + NOTHING,
    ),
    unit_case(
        "service: a device group with a blank",
        {"device_groups": ["video", "render wheel"]},
        "lingbot_service_device_groups[1]: 'render wheel' is not a user or group name; use "
        "letters, digits, '_' and '-', starting with a letter or '_', at most 32 characters "
        "(e.g. lingbot)." + NOTHING,
    ),
    unit_case(
        "service: a model path that starts a directive",
        {"model_path": f"/srv/model\n{INJECTED}"},
        f"lingbot_service_model_path: '/srv/model\\n{INJECTED}' holds the control character "
        f"'\\n', {UNIT_LINE}." + NOTHING,
    ),
    unit_case(
        "service: an extra argument that starts a root ExecCondition",
        {"extra_args": ["--verbose", f"--batch-size=8\n{INJECTED}"]},
        f"lingbot_service_extra_args[1]: '--batch-size=8\\n{INJECTED}' holds the control "
        f"character '\\n', {UNIT_LINE}." + NOTHING,
    ),
    unit_case(
        "service: a comment header with a carriage return",
        {"header": f"managed\r{INJECTED}"},
        f"header: 'managed\\r{INJECTED}' holds the control character '\\r', {UNIT_LINE}",
    ),
    unit_case(
        "service: a GPU UUID read from the node that starts a root ExecCondition",
        {"plan": node_plan(uuid=f"GPU-1\n{INJECTED}")},
        f"plan instance main: CUDA_VISIBLE_DEVICES: 'CUDA_VISIBLE_DEVICES=GPU-1\\n{INJECTED},"
        "GPU-11540733-53c6-4b27-9b89-a46dfe945aec' holds the control character '\\n', "
        f"{UNIT_LINE}",
    ),
    unit_case(
        "service: a port above 65535",
        {"plan": node_plan(port=70000)},
        "plan instance main: port: 70000 is not a TCP port; give an integer from 1 to 65535 "
        "(with several instances, the last one's port is base port + instances - 1)",
    ),
]

# --- the API key of the rollout gate's load: the lingbot_chat_load module -----------------


def chat_load(**args: Any) -> Runner:
    def run(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
        module = role_module("rollout_gate", "lingbot_chat_load")
        arguments = {"instances": [{"name": "main", "port": 8000}], "root": str(root), **args}
        result = run_module(monkeypatch, module, arguments)
        assert result["failed"], result
        return [result["msg"]]

    return run


CHAT_LOAD_CASES = [
    (
        "chat load: the API key as a list",
        {},
        chat_load(api_key=["s3cret"]),
        [
            "invalid chat load settings: lingbot_service_api_key is a list, not a string; give "
            'the key itself as one string (from a vault), or "" for none'
        ],
    ),
    (
        "chat load: the API key to an address that is not the node's",
        {},
        chat_load(api_key="s3cret", host="192.0.2.1"),
        [
            "invalid chat load settings: lingbot_service_health_host '192.0.2.1' is not an "
            "address of this node: the load would send lingbot_service_api_key over plain HTTP "
            "off the node. Use 127.0.0.1, or the address LingBot listens on"
        ],
    ),
]

# --- rollout batch specs: what the rollout_batches action plugin computes -----------------

BATCH_LIST = "rollout_batches must be a non-empty list of host counts and percentages, e.g. "
AT_LEAST_ONE = (
    "a batch needs at least 1 host (Ansible would run every remaining host at once for 0 or "
    "less); use 1 or more, or '100%' for all the rest"
)


def batches(spec: Any) -> Runner:
    def run(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
        with pytest.raises(BatchSpecError) as refused:
            batch_plan(spec, ["node1", "node2", "node3"])
        return [str(refused.value)]

    return run


def max_fail_percentage(value: Any) -> Runner:
    def run(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
        problem = max_fail_percentage_problem(value)
        assert problem is not None
        return [problem]

    return run


MAX_FAIL = (
    "rollout_max_fail_percentage must be a whole percentage from 0 to 100 (0 stops the "
    "rollout at the first node that fails its gate); got "
)

BATCH_CASES = [
    ("max_fail_percentage: 101", {}, max_fail_percentage(101), [f"{MAX_FAIL}101"]),
    ("max_fail_percentage: '5%'", {}, max_fail_percentage("5%"), [f"{MAX_FAIL}5%"]),
    ("max_fail_percentage: a boolean", {}, max_fail_percentage(True), [f"{MAX_FAIL}True"]),
    ("batches: 0", {}, batches([1, 0]), [f"rollout_batches item 2 (0): {AT_LEAST_ONE}"]),
    ("batches: -1", {}, batches(-1), [f"rollout_batches item 1 (-1): {AT_LEAST_ONE}"]),
    (
        "batches: a fractional percentage",
        {},
        batches([1, "5.5%"]),
        [
            "rollout_batches item 2 ('5.5%'): not a host count or a whole percentage; write "
            "e.g. 5 or '20%'"
        ],
    ),
    (
        "batches: 0%",
        {},
        batches(["0%"]),
        ["rollout_batches item 1 ('0%'): a percentage must be from 1% to 100%"],
    ),
    (
        "batches: 101%",
        {},
        batches([1, "101%"]),
        ["rollout_batches item 2 ('101%'): a percentage must be from 1% to 100%"],
    ),
    (
        "batches: a YAML boolean",
        {},
        batches(True),
        [f"{BATCH_LIST}[1, '5%', '20%', '100%']; got True"],
    ),
    (
        "batches: a list that arrived as text",
        {},
        batches("[1, 2]"),
        [
            "rollout_batches arrived as the text '[1, 2]', not a list; pass it as JSON: "
            """-e '{"rollout_batches": [1, "5%", "20%", "100%"]}'"""
        ],
    ),
    ("batches: empty", {}, batches([]), [f"{BATCH_LIST}[1, '5%', '20%', '100%']; got []"]),
    ("batches: 1.5", {}, batches(1.5), [f"{BATCH_LIST}[1, '5%', '20%', '100%']; got 1.5"]),
    (
        "batches: a boolean item",
        {},
        batches([1, False]),
        ["rollout_batches item 2 (False): use a host count (1, 2, ...) or a percentage ('20%')"],
    ),
]

CASES = (
    GRUB_CASES
    + KERNEL_PARAMETER_CASES
    + PROBE_CASES
    + PLANNER_CASES
    + GENERATION_CASES
    + OVERRIDE_CASES
    + UNIT_CASES
    + CHAT_LOAD_CASES
    + BATCH_CASES
)


@pytest.mark.parametrize(
    ("files", "runner", "messages"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_malformed_input_is_refused_and_nothing_is_written(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    files: dict[str, Any],
    runner: Runner,
    messages: list[str],
) -> None:
    root = tmp_path / "node"
    root.mkdir()
    write_tree(root, files)
    if "/usr/bin/numactl" in files:
        os.chmod(root / "usr/bin/numactl", 0o755)
    before = checksums(root)
    assert runner(monkeypatch, root) == [m.replace("{root}", str(root)) for m in messages]
    assert checksums(root) == before


def test_the_planner_refuses_the_same_uuid_in_the_facts() -> None:
    facts, probe = plan_support.lab_inputs("a6000-phb")
    old = facts["gpus"][0]["uuid"]
    hostile = json.dumps(f"GPU-1\n{INJECTED}")[1:-1]
    facts = json.loads(json.dumps(facts).replace(old, hostile))
    with pytest.raises(PlanInputError) as refused:
        build_plan(facts, probe, {})
    assert str(refused.value).startswith(
        f"facts: GPU 0 (gpus[0]): uuid is 'GPU-1\\n{INJECTED}', not of the form "
        "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (or MIG-...)"
    )
