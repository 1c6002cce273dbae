"""`lingbot-fleet doctor`: the audit of the machine it runs on, in one process.

What an engineer runs on a new GPU server before enrolling it, and what a fleet audit would
say of it, without Ansible, without network and with the standard library alone (the
driver's NVML through nvidia-ml-py when it is installed, else nvidia-smi; the CUDA driver
through libcuda for the probe): the facts, the link, driver, NVLink, kernel and boot
checks, a short probe of every GPU path (host copies and peer copies), and the findings,
with the audit's codes and exit statuses (docs/doctor.md). It writes nothing.

Run it from an installed toolkit (`lingbot-fleet doctor`) or from a checkout with the
system python3 (`PYTHONPATH=python python3 -m lingbot_fleet.cli doctor`).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..gpu.probe import MIB, ProbeParameters, run_probe, start_link_sampler
from ..node.findings import SEVERITIES, severity_label, severity_overrides, severity_rank
from ..node.values import ValueRefusedError
from .evaluate import AuditPolicy, driver_parts_text, evaluate_node, section_error
from .fleet import EXIT_COMPLIANT, EXIT_FINDINGS, EXIT_NODES_FAILED
from .node_document import collect_node

DOCTOR_SCHEMA_VERSION = 1
# A short probe: every ordered pair and every GPU's host copies at 64 MiB, 3 samples each,
# within the budget. The fleet's probe (p2p_probe) measures at 256 MiB.
DEFAULT_PROBE_SIZE_MIB = 64
DEFAULT_PROBE_BUDGET_S = 60.0


def examine(  # noqa: PLR0913 - the doctor's options, keyword-only
    *,
    root: str = "/",
    probe: bool = True,
    probe_size_mib: int = DEFAULT_PROBE_SIZE_MIB,
    probe_budget_s: float = DEFAULT_PROBE_BUDGET_S,
    fail_on: str = "error",
    finding_severity: Mapping[str, str] | None = None,
    use_nvml: bool = True,
    smi_command: Sequence[str] = ("nvidia-smi",),
    cuda_library: str = "libcuda.so.1",
) -> dict[str, Any]:
    """The doctor's document: the node's audit record, with the probe it ran and the
    status against ``fail_on``, every finding with the severity ``finding_severity`` (code
    -> severity, as lingbot_fleet_finding_severity) gives its code."""
    node = collect_node(root=root, use_nvml=use_nvml, smi_command=smi_command)
    read = node.get("facts")
    facts: Mapping[str, Any] = read if section_error(read) is None and read else {}
    fresh_probe = None
    probe_note = None
    if not probe:
        probe_note = "not run (--no-probe)"
    elif not facts.get("gpus"):
        probe_note = "not run: no GPU to measure"
    elif (facts.get("driver") or {}).get("state") not in (None, "answers"):
        probe_note = "not run: the NVIDIA driver does not answer"
    else:
        parameters = ProbeParameters(size_bytes=probe_size_mib * MIB, time_budget_s=probe_budget_s)
        # The GPU link is read under the probe's load, as the fleet's probe reads it.
        sampler, stop_sampler, sampler_note = start_link_sampler(use_nvml, (), smi_command)
        try:
            fresh_probe = run_probe(
                dict(facts), parameters, cuda_library=cuda_library, sampler=sampler
            )
        finally:
            stop_sampler()
        if sampler_note:
            fresh_probe["notes"].append(sampler_note)
    overrides = dict(finding_severity or {})
    record = evaluate_node(node, AuditPolicy(finding_severity=overrides), fresh_probe)
    worst = max((severity_rank(f["severity"]) for f in record["findings"]), default=-1)
    return {
        "schema_version": DOCTOR_SCHEMA_VERSION,
        "host": socket.gethostname(),
        "fail_on": fail_on,
        "finding_severity": overrides,
        "status": "findings" if worst >= severity_rank(fail_on) else "ok",
        "probe_note": probe_note,
        "probe_document": fresh_probe,
        **record,
    }


def _figure(value: Any, unit: str = "") -> str:
    return (
        "-" if value is None else f"{value:.1f}{unit}" if isinstance(value, float) else str(value)
    )


def _gpu_line(gpu: Mapping[str, Any], probe_gpu: Mapping[str, Any] | None) -> str:
    if gpu.get("lost"):
        return f"  GPU {gpu.get('index')}  {gpu.get('bus_id')}  LOST (the driver does not answer)"
    link = gpu.get("link") or {}
    mode = gpu.get("persistence_mode")
    persistence = "?" if mode is None else "on" if mode else "off"
    words = [
        f"  GPU {gpu.get('index')}",
        str(gpu.get("model") or "?"),
        str(gpu.get("bus_id")),
        f"NUMA {_figure(gpu.get('numa_node'))}",
        f"PCIe Gen{_figure(link.get('current_gen'))} x{_figure(link.get('current_width'))}"
        f" (can Gen{_figure(link.get('max_gen'))} x{_figure(link.get('max_width'))})",
        f"persistence {persistence}",
    ]
    if probe_gpu is not None:
        words.append(
            f"H2D {_figure(probe_gpu.get('h2d_gbytes_per_s'), ' GB/s')}"
            f" D2H {_figure(probe_gpu.get('d2h_gbytes_per_s'), ' GB/s')}"
        )
        under_load = probe_gpu.get("link_under_load") or {}
        if under_load.get("gen") is not None:
            words.append(f"under load Gen{under_load.get('gen')} x{under_load.get('width')}")
    return "  ".join(words)


def render_text(document: Mapping[str, Any]) -> str:
    """The summary an engineer reads at the console."""
    facts = document.get("facts") or {}
    lines = [f"lingbot-fleet doctor: {document['host']}"]
    sources = facts.get("sources") or {}
    lines.append(
        f"driver {driver_parts_text(facts)} (GPUs read through "
        f"{sources.get('gpus') or 'nothing'}), IOMMU {facts.get('iommu_mode') or 'unknown'}, "
        f"{_figure(facts.get('numa_node_count'))} NUMA node(s), "
        f"{len(facts.get('gpus') or [])} NVIDIA GPU(s)"
    )
    probe_gpus = {
        gpu.get("index"): gpu for gpu in (document.get("probe_document") or {}).get("gpus") or []
    }
    lines += [_gpu_line(gpu, probe_gpus.get(gpu.get("index"))) for gpu in facts.get("gpus") or []]
    probe = document.get("probe")
    if document.get("probe_note"):
        lines.append(f"probe: {document['probe_note']}")
    elif probe:
        lines.append(
            f"probe: {_figure(probe.get('duration_s'))} s at "
            f"{(probe.get('size_bytes') or 0) // MIB} MiB; peer copies (GB/s, peer access on):"
        )
        indices = probe.get("gpu_indices") or []
        lines.append("        " + "".join(f"{f'GPU {i}':>9}" for i in indices))
        matrix = probe.get("p2p_gbytes_per_s") or []
        for row_index, index in enumerate(indices):
            row = list(matrix[row_index]) if row_index < len(matrix) else []
            row += [None] * (len(indices) - len(row))
            cells = "".join(
                f"{'X' if column == index else _figure(row[position]):>9}"
                for position, column in enumerate(indices)
            )
            lines.append(f"  GPU {index:<3}{cells}")
    kernel = document.get("kernel") or {}
    if kernel.get("next_boot") is None:
        lines.append("kernel: no default boot entry was found (grub.cfg, BLS entries)")
    else:
        driver = kernel.get("next_boot_driver") or {}
        pending = "a reboot is pending" if kernel.get("pending_reboot") else "no reboot pending"
        lines.append(
            f"kernel: {pending}; the next boot's kernel {driver.get('kernel') or 'unknown'}, "
            f"its NVIDIA module {driver.get('state') or 'not looked for'}"
        )
    findings = sorted(
        document.get("findings") or [],
        key=lambda f: (-severity_rank(f["severity"]), f["code"], str(f["subject"])),
    )
    lines.append(f"findings: {len(findings)}")
    for finding in findings:
        lines.append(
            f"  {severity_label(finding):<8} {finding['code']} {finding['subject']}: "
            f"{finding['message']}"
        )
        if finding.get("fix"):
            lines.append(f"           fix: {finding['fix']}")
    verdict = (
        f"no finding at or above {document['fail_on']}"
        if document["status"] == "ok"
        else f"findings at or above {document['fail_on']}"
    )
    lines.append(f"verdict: {document['status']} ({verdict})")
    return "\n".join(lines) + "\n"


def doctor_command(args: argparse.Namespace) -> int:
    try:
        document = examine(
            root=args.root,
            probe=not args.no_probe,
            probe_size_mib=args.probe_size_mib,
            probe_budget_s=args.probe_budget_s,
            fail_on=args.fail_on,
            finding_severity=dict(args.severity),
        )
    except OSError as error:
        print(f"lingbot-fleet doctor: {error}", file=sys.stderr)
        return EXIT_NODES_FAILED
    if args.json:
        print(json.dumps(document, indent=2, sort_keys=True))
    else:
        sys.stdout.write(render_text(document))
    return EXIT_FINDINGS if document["status"] == "findings" else EXIT_COMPLIANT


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number of 1 or more")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number above 0")
    return value


def _severity_override(text: str) -> tuple[str, str]:
    """One --severity CODE=LEVEL, checked as lingbot_fleet_finding_severity is."""
    code, equals, level = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not CODE=LEVEL; give e.g. --severity PROBE_MISSING=warning"
        )
    try:
        severity_overrides({code: level}, "--severity")
    except ValueRefusedError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error.reason}") from None
    return code, level


def add_doctor_parser(commands: Any) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="check the GPU server this runs on (facts, checks, a short probe), no Ansible",
        description="The audit of this machine in one process: facts, link, driver, NVLink "
        "and boot checks, a short probe of every GPU path. Exit status: 0 no finding at or "
        "above --fail-on, 1 findings at or above it, 2 the machine could not be read.",
    )
    doctor.add_argument("--json", action="store_true", help="print the document as JSON")
    doctor.add_argument("--no-probe", action="store_true", help="skip the probe")
    doctor.add_argument(
        "--probe-size-mib",
        type=_positive_int,
        default=DEFAULT_PROBE_SIZE_MIB,
        help=f"copy size of the probe (default {DEFAULT_PROBE_SIZE_MIB})",
    )
    doctor.add_argument(
        "--probe-budget-s",
        type=_positive_float,
        default=DEFAULT_PROBE_BUDGET_S,
        help=f"stop measuring pairs after this many seconds (default {DEFAULT_PROBE_BUDGET_S:g})",
    )
    doctor.add_argument(
        "--fail-on",
        choices=SEVERITIES,
        default="error",
        help="a finding of this severity or worse exits 1 (default error)",
    )
    doctor.add_argument(
        "--severity",
        type=_severity_override,
        action="append",
        default=[],
        metavar="CODE=LEVEL",
        help="judge the finding CODE at LEVEL (info, warning, error, critical) instead of its "
        "own severity, as the fleet's lingbot_fleet_finding_severity does; repeatable",
    )
    doctor.add_argument(
        "--root", default="/", help="read the machine under this directory (image builds, tests)"
    )
    doctor.set_defaults(func=doctor_command)
