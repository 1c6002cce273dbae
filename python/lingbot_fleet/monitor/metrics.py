"""The monitor's metrics: Prometheus text for node_exporter's textfile collector.

Every family is a gauge with HELP and TYPE lines; a figure that could not be measured is
left out rather than written as 0. The file is replaced atomically through a hidden temp
file of the same directory, which the collector (it reads ``*.prom``) never picks up
half-written: ``lingbot_fleet.node.atomic.write_atomic``, the implementation NodeChanges (and
``nodefiles.write_atomic``) uses, imported from there so the program on the nodes does not
carry NodeChanges and the generations code.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..node.atomic import write_atomic

METRIC_PREFIX = "lingbot_fleet_"

MetricSample = tuple[dict[str, str], float]

# Base units, as Prometheus wants them (promtool check metrics): bytes per second and
# seconds. The probe measures GB/s (10^9 bytes/s) and ns; the samples are converted here.
BYTES_PER_GBYTE = 1e9
SECONDS_PER_NS = 1e-9

METRICS: dict[str, str] = {
    "p2p_bandwidth_bytes_per_second": "Measured unidirectional P2P bandwidth (peer access on) "
    "of a GPU pair the plan uses, bytes per second.",
    "p2p_threshold_bytes_per_second": "Peer-access threshold of the instance using the pair, "
    "bytes per second.",
    "p2p_usable": "1 when the used pair is at or above its threshold and its data check "
    "passed, else 0.",
    "p2p_latency_seconds": "Measured small-copy P2P latency (peer access on) of a used pair, "
    "seconds.",
    "gpu_link_generation": "PCIe link generation of the GPU under load (idle reading when "
    "no load sample).",
    "gpu_link_width": "PCIe link width of the GPU (lanes).",
    "gpu_host_bandwidth_bytes_per_second": "Pinned host-to-device (h2d) and device-to-host "
    "(d2h) bandwidth of the GPU, bytes per second.",
    "findings": "Findings of the last monitor run by severity.",
    "finding": "Findings of the last monitor run by code, severity and subject (a GPU's bus "
    "id, a pair, the node): how many.",
    "plan_drift": "Drifted paths: used pairs not usable now plus planned GPUs lost.",
    "path_below_threshold_runs": "Consecutive monitor runs in which the used pair was not usable.",
    "fallback_recommended": "1 when the instance should fall back to a single GPU.",
    "monitor_last_run_timestamp_seconds": "When the last monitor run finished, Unix time.",
    "monitor_duration_seconds": "How long the last monitor run took, seconds.",
}


def escape_label_value(value: str) -> str:
    """Prometheus text format: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def render_metrics(families: Mapping[str, Sequence[MetricSample]]) -> str:
    """Prometheus text exposition (every family a gauge) with HELP and TYPE lines."""
    lines: list[str] = []
    for short_name, help_text in METRICS.items():
        name = METRIC_PREFIX + short_name
        lines.append(f"# HELP {name} {_escape_help(help_text)}")
        lines.append(f"# TYPE {name} gauge")
        for labels, value in families.get(short_name, ()):
            label_text = ",".join(
                f'{key}="{escape_label_value(str(labels[key]))}"' for key in labels
            )
            series = f"{name}{{{label_text}}}" if label_text else name
            lines.append(f"{series} {format_value(value)}")
    return "\n".join(lines) + "\n"


def metric_families(report: Mapping[str, Any]) -> dict[str, list[MetricSample]]:
    """The report of one run as metric samples."""
    families: dict[str, list[MetricSample]] = {name: [] for name in METRICS}
    for pair in report["pairs"]:
        labels = {"src": str(pair["src"]), "dst": str(pair["dst"])}
        if pair["measured_gbytes_per_s"] is not None:
            bandwidth = pair["measured_gbytes_per_s"] * BYTES_PER_GBYTE
            families["p2p_bandwidth_bytes_per_second"].append((labels, bandwidth))
        if pair["latency_ns"] is not None:
            families["p2p_latency_seconds"].append((labels, pair["latency_ns"] * SECONDS_PER_NS))
        threshold = pair["threshold_gbytes_per_s"] * BYTES_PER_GBYTE
        families["p2p_threshold_bytes_per_second"].append((labels, threshold))
        families["p2p_usable"].append((labels, 1 if pair["usable"] else 0))
        families["path_below_threshold_runs"].append((labels, pair["below_threshold_runs"]))
    for gpu in report["gpus"]:
        labels = {"gpu": str(gpu["index"]), "bus_id": gpu["bus_id"] or ""}
        if gpu["link_generation"] is not None:
            families["gpu_link_generation"].append((labels, gpu["link_generation"]))
        if gpu["link_width"] is not None:
            families["gpu_link_width"].append((labels, gpu["link_width"]))
        for direction in ("h2d", "d2h"):
            figure = gpu[f"{direction}_gbytes_per_s"]
            if figure is not None:
                families["gpu_host_bandwidth_bytes_per_second"].append(
                    ({"gpu": str(gpu["index"]), "direction": direction}, figure * BYTES_PER_GBYTE)
                )
    for severity, count in report["findings_by_severity"].items():
        families["findings"].append(({"severity": severity}, count))
    for (code, severity, subject), count in Counter(
        (f["code"], f["severity"], str(f["subject"])) for f in report.get("findings") or []
    ).items():
        labels = {"code": code, "severity": severity, "subject": subject}
        families["finding"].append((labels, count))
    families["plan_drift"].append(({}, report["plan_drift"]))
    for instance, recommended in report["fallback_recommended"].items():
        families["fallback_recommended"].append(({"instance": instance}, 1 if recommended else 0))
    families["monitor_last_run_timestamp_seconds"].append(({}, report["finished_unix_s"]))
    families["monitor_duration_seconds"].append(({}, report["duration_s"]))
    return families


def write_textfile(directory: str, name: str, text: str) -> str:
    """Replace ``directory/name`` with ``text`` atomically; returns the path."""
    path = os.path.join(directory, name)
    write_atomic(path, text, mode=0o644)
    return path
