"""Read the facts document (docs/facts.md), the probe result (docs/probe.md) and findings."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..gpu.probe_saved import PROBE_SCHEMA_VERSION
from .model import (
    UNKNOWN_NUMA_NODE,
    DirectedPath,
    FindingRef,
    GpuInput,
    PlanInputError,
    PlanInputs,
)

FACTS_SCHEMA_VERSION = 1
# Largest GPU index and NUMA node number the planner accepts: far above any machine, low
# enough that a hostile document cannot make the planner build huge tables.
MAX_GPU_INDEX = 1023
MAX_NUMA_NODE = 1023
_HEX_UUID = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# GPU-<uuid>; MIG-<uuid> (R470+) or MIG-GPU-<uuid>/<gi>/<ci> (older drivers). Nothing else
# may reach CUDA_VISIBLE_DEVICES, where a comma would name another GPU.
_UUID_RE = re.compile(
    rf"GPU-{_HEX_UUID}|MIG-{_HEX_UUID}|MIG-GPU-{_HEX_UUID}/[0-9]{{1,3}}/[0-9]{{1,3}}"
)
_BUS_ID_RE = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
UUID_FORM = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (or MIG-...)"
# Older drivers print SOC for SYS.
TOPOLOGY_ALIASES = {"SOC": "SYS"}


def _matrix_word(matrix: Any, a: int, b: int) -> str | None:
    try:
        word = matrix[a][b]
    except (IndexError, KeyError, TypeError):
        return None
    if not isinstance(word, str):
        return None
    return TOPOLOGY_ALIASES.get(word, word)


def _mig_enabled(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "enabled"
    return bool(value)


def _numa_node(raw: Any, node_count: int | None) -> tuple[int, bool]:
    """(node, assumed): -1 stays unknown unless the machine has one NUMA node only."""
    node = raw if isinstance(raw, int) and not isinstance(raw, bool) else UNKNOWN_NUMA_NODE
    if node < 0 and node_count == 1:
        return 0, True
    return (node if node >= 0 else UNKNOWN_NUMA_NODE), False


def _finding_fields(finding: Any) -> tuple[str, str, str]:
    if isinstance(finding, Mapping):
        values: tuple[Any, ...] = (
            finding.get("code"),
            finding.get("severity"),
            finding.get("subject"),
        )
    else:
        values = tuple(getattr(finding, name, None) for name in ("code", "severity", "subject"))
    if not all(isinstance(value, str) for value in values):
        raise PlanInputError(
            f"finding {finding!r}: needs code, severity and subject as text "
            "(a lingbot_fleet.node.findings.Finding or its to_dict())"
        )
    # all() above proved three texts; mypy does not narrow a tuple through all().
    return values  # type: ignore[return-value]


def findings_by_subject(findings: Iterable[Any] | None) -> dict[str, tuple[FindingRef, ...]]:
    """Lower-cased subject (bus id, UUID or 'gpu N') -> its findings, in input order."""
    grouped: dict[str, list[FindingRef]] = {}
    for finding in findings or ():
        code, severity, subject = _finding_fields(finding)
        grouped.setdefault(subject.strip().lower(), []).append(FindingRef(code, severity))
    return {subject: tuple(refs) for subject, refs in grouped.items()}


def _gpu_findings(
    gpu: Mapping[str, Any], grouped: Mapping[str, tuple[FindingRef, ...]]
) -> tuple[FindingRef, ...]:
    # A finding about a PCIe bridge above the GPU (PCIE_ACS_REDIRECT on a switch port, say)
    # is about the GPU's link too.
    bridges = [
        str(bridge.get("bdf") or "")
        for bridge in gpu.get("bridges") or []
        if isinstance(bridge, Mapping)
    ]
    subjects = [
        str(gpu.get("bus_id") or ""),
        str(gpu.get("uuid") or ""),
        f"gpu {gpu['index']}",
        *bridges,
    ]
    refs: list[FindingRef] = []
    for subject in subjects:
        if subject:
            refs.extend(grouped.get(subject.lower(), ()))
    return tuple(refs)


def _is_schema(document: Mapping[str, Any], expected: int) -> bool:
    version = document.get("schema_version")
    # True == 1 in Python: a boolean is not a schema version.
    return not isinstance(version, bool) and version == expected


def _entries(document: Mapping[str, Any], key: str, where: str, fix: str) -> list[Any]:
    """``document[key]`` as a list of mappings (absent: empty), or PlanInputError."""
    value = document.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise PlanInputError(f"{where}: {key} is {value!r}, not a list; {fix}")
    for position, entry in enumerate(value):
        if not isinstance(entry, Mapping):
            raise PlanInputError(
                f"{where}: {key}[{position}] is {entry!r}, not a {key[:-1]} entry; {fix}"
            )
    return value


def _is_figure(item: Any) -> bool:
    """A measured figure: null, or a finite number that is not negative (never a bool or
    text, which a hand-edited or foreign document may hold)."""
    if item is None:
        return True
    if isinstance(item, bool) or not isinstance(item, int | float):
        return False
    return math.isfinite(item) and item >= 0


def _check_finite(value: Any, where: str, fix: str) -> None:
    """Every measured figure (``*_gbytes_per_s``, ``*_ns``) is a finite number >= 0 or null."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            name = f"{where}.{key}"
            if (
                isinstance(key, str)
                and key.endswith(("gbytes_per_s", "_ns"))
                and not _is_figure(item)
            ):
                raise PlanInputError(f"{name} is {item!r}, not a measured figure; {fix}")
            _check_finite(item, name, fix)
    elif isinstance(value, list):
        for position, item in enumerate(value):
            _check_finite(item, f"{where}[{position}]", fix)


def _check_facts(facts: Mapping[str, Any]) -> None:
    if not isinstance(facts, Mapping):
        raise PlanInputError("facts: expected the gpu_facts document (a mapping)")
    if not _is_schema(facts, FACTS_SCHEMA_VERSION):
        raise PlanInputError(
            f"facts: schema_version is {facts.get('schema_version')!r}, the planner reads "
            f"{FACTS_SCHEMA_VERSION}; "
            "gather the facts again with this toolkit's gpu_facts"
        )
    if not isinstance(facts.get("gpus"), list):
        raise PlanInputError("facts: missing the gpus list; gather the facts again with gpu_facts")
    fix = "gather the facts again with gpu_facts"
    for key in ("numa", "kernel", "p2p"):
        if facts.get(key) is not None and not isinstance(facts.get(key), Mapping):
            raise PlanInputError(f"facts: {key} is {facts.get(key)!r}, not a mapping; {fix}")
    node_count = (facts.get("numa") or {}).get("node_count")
    if node_count is not None and not _is_int(node_count, 0, MAX_NUMA_NODE + 1):
        raise PlanInputError(
            f"facts: numa.node_count is {node_count!r}, not a whole number from 0 to "
            f"{MAX_NUMA_NODE + 1}; {fix}"
        )
    cmdline = (facts.get("kernel") or {}).get("cmdline")
    if cmdline is not None and not isinstance(cmdline, str):
        raise PlanInputError(f"facts: kernel.cmdline is {cmdline!r}, not text; {fix}")
    seen: dict[int, int] = {}
    for position, gpu in enumerate(_entries(facts, "gpus", "facts", fix)):
        index = gpu.get("index")
        if isinstance(index, bool) or not isinstance(index, int):
            raise PlanInputError(
                f"facts: gpus[{position}].index is {index!r}, not a GPU index; {fix}"
            )
        if not 0 <= index <= MAX_GPU_INDEX:
            raise PlanInputError(
                f"facts: gpus[{position}].index is {index}, not a GPU index from 0 to "
                f"{MAX_GPU_INDEX}; {fix}"
            )
        if index in seen:
            raise PlanInputError(
                f"facts: gpus[{position}] and gpus[{seen[index]}] both have index {index}; {fix}"
            )
        seen[index] = position
        _check_gpu(gpu, f"facts: GPU {index} (gpus[{position}])", fix)


def _is_int(value: Any, low: int, high: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def _check_texts(entry: Mapping[str, Any], keys: tuple[str, ...], where: str, fix: str) -> None:
    for key in keys:
        value = entry.get(key)
        if value is not None and not isinstance(value, str):
            raise PlanInputError(f"{where}.{key} is {value!r}, not text or null; {fix}")


def _check_gpu(gpu: Mapping[str, Any], where: str, fix: str) -> None:
    """The fields the planner reads have the types docs/facts.md gives them."""
    lost = gpu.get("lost")
    if lost is not None and not isinstance(lost, bool):
        raise PlanInputError(
            f"{where}: lost is {lost!r}, not true or false (a string such as 'false' would "
            f"count as lost); {fix}"
        )
    uuid = gpu.get("uuid")
    if uuid is not None and not (isinstance(uuid, str) and _UUID_RE.fullmatch(uuid)):
        raise PlanInputError(
            f"{where}: uuid is {uuid!r}, not of the form {UUID_FORM}; it goes into "
            f"CUDA_VISIBLE_DEVICES, where anything else could select another GPU; {fix}"
        )
    bus_id = gpu.get("bus_id")
    if bus_id not in (None, "") and not (isinstance(bus_id, str) and _BUS_ID_RE.fullmatch(bus_id)):
        raise PlanInputError(
            f"{where}: bus_id is {bus_id!r}, not a PCI address like 0000:41:00.0; {fix}"
        )
    numa_node = gpu.get("numa_node")
    if numa_node is not None and not _is_int(numa_node, -1, MAX_NUMA_NODE):
        raise PlanInputError(
            f"{where}: numa_node is {numa_node!r}, not -1 (unknown) or a NUMA node from 0 to "
            f"{MAX_NUMA_NODE}; {fix}"
        )
    for key in ("model", "mig_mode"):
        value = gpu.get(key)
        if value is not None and not isinstance(value, str | bool):
            raise PlanInputError(f"{where}: {key} is {value!r}, not text; {fix}")
    bridges = gpu.get("bridges")
    if bridges is not None and not isinstance(bridges, list):
        raise PlanInputError(f"{where}: bridges is {bridges!r}, not a list; {fix}")


def _check_probe(probe: Mapping[str, Any]) -> None:
    if not isinstance(probe, Mapping):
        raise PlanInputError("probe: expected the p2p_probe result document (a mapping)")
    if not _is_schema(probe, PROBE_SCHEMA_VERSION):
        raise PlanInputError(
            f"probe: schema_version is {probe.get('schema_version')!r}, the planner reads "
            f"{PROBE_SCHEMA_VERSION}; "
            "run this toolkit's p2p_probe again"
        )
    fix = "run this toolkit's p2p_probe again"
    for position, entry in enumerate(_entries(probe, "gpus", "probe", fix)):
        where = f"probe: gpus[{position}]"
        if not _is_int(entry.get("index"), 0, MAX_GPU_INDEX):
            raise PlanInputError(
                f"{where}.index is {entry.get('index')!r}, not a GPU index from 0 to "
                f"{MAX_GPU_INDEX}; {fix}"
            )
        _check_texts(entry, ("uuid", "error"), where, fix)
    for position, entry in enumerate(_entries(probe, "pairs", "probe", fix)):
        where = f"probe: pairs[{position}]"
        for key in ("src", "dst"):
            if not _is_int(entry.get(key), 0, MAX_GPU_INDEX):
                raise PlanInputError(
                    f"{where}.{key} is {entry.get(key)!r}, not a GPU index from 0 to "
                    f"{MAX_GPU_INDEX}; {fix}"
                )
        access = entry.get("can_access_peer")
        if access is not None and not isinstance(access, bool):
            raise PlanInputError(f"{where}.can_access_peer is {access!r}, not true or false; {fix}")
        enabled = entry.get("p2p_enabled")
        if enabled is not None and not isinstance(enabled, Mapping):
            raise PlanInputError(f"{where}.p2p_enabled is {enabled!r}, not a mapping; {fix}")
        _check_texts(entry, ("data_check", "error"), where, fix)
    _check_finite({key: probe.get(key) for key in ("gpus", "pairs")}, "probe", fix)


def _probe_gpus(probe: Mapping[str, Any], facts_gpus: list[Mapping[str, Any]]) -> dict[int, Any]:
    uuids = {gpu["index"]: gpu.get("uuid") for gpu in facts_gpus}
    by_index: dict[int, Any] = {}
    for entry in probe.get("gpus") or []:
        index = entry.get("index")
        if index not in uuids:
            continue
        probe_uuid, facts_uuid = entry.get("uuid"), uuids[index]
        if probe_uuid and facts_uuid and probe_uuid != facts_uuid:
            raise PlanInputError(
                f"probe: GPU index {index} is {probe_uuid} but the facts say {facts_uuid}; "
                "facts and probe come from different nodes or boots: gather both again"
            )
        by_index[index] = entry
    return by_index


def _bandwidth(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value >= 0 else None


def _directed_path(
    facts: Mapping[str, Any], probe_pairs: Mapping[tuple[int, int], Any], a: int, b: int
) -> DirectedPath:
    p2p = facts.get("p2p") or {}
    measured = probe_pairs.get((a, b))
    path = DirectedPath(
        src=a,
        dst=b,
        path_type=_matrix_word(facts.get("topology"), a, b),
        p2p_read=_matrix_word(p2p.get("read"), a, b),
        p2p_write=_matrix_word(p2p.get("write"), a, b),
    )
    if measured is None:
        return path
    enabled = measured.get("p2p_enabled") or {}
    return DirectedPath(
        src=a,
        dst=b,
        path_type=path.path_type,
        p2p_read=path.p2p_read,
        p2p_write=path.p2p_write,
        measured=True,
        can_access_peer=bool(measured.get("can_access_peer")),
        gbytes_per_s=_bandwidth(enabled.get("unidirectional_gbytes_per_s")),
        latency_ns=_bandwidth(enabled.get("latency_ns")),
        data_check=measured.get("data_check"),
        error=measured.get("error"),
    )


def read_inputs(
    facts: Mapping[str, Any],
    probe: Mapping[str, Any] | None = None,
    findings: Iterable[Any] | None = None,
) -> PlanInputs:
    """The planner's model of the node; PlanInputError when a document cannot be used."""
    _check_facts(facts)
    if probe is not None:
        _check_probe(probe)
    facts_gpus = sorted(facts["gpus"], key=lambda gpu: gpu["index"])
    node_count = (facts.get("numa") or {}).get("node_count")
    grouped = findings_by_subject(findings)
    probe_gpus = _probe_gpus(probe, facts_gpus) if probe is not None else {}
    gpus = []
    for gpu in facts_gpus:
        numa_node, assumed = _numa_node(gpu.get("numa_node"), node_count)
        measured = probe_gpus.get(gpu["index"])
        gpus.append(
            GpuInput(
                index=gpu["index"],
                uuid=gpu.get("uuid"),
                model=gpu.get("model"),
                bus_id=str(gpu.get("bus_id") or ""),
                numa_node=numa_node,
                numa_node_assumed=assumed,
                mig_enabled=_mig_enabled(gpu.get("mig_mode")),
                lost=bool(gpu.get("lost")),
                h2d_gbytes_per_s=_bandwidth((measured or {}).get("h2d_gbytes_per_s")),
                d2h_gbytes_per_s=_bandwidth((measured or {}).get("d2h_gbytes_per_s")),
                in_probe=measured is not None,
                probe_error=(measured or {}).get("error"),
                findings=_gpu_findings(gpu, grouped),
            )
        )
    probe_pairs = {
        (pair.get("src"), pair.get("dst")): pair for pair in (probe or {}).get("pairs") or []
    }
    indices = [gpu.index for gpu in gpus]
    paths = {
        (a, b): _directed_path(facts, probe_pairs, a, b) for a in indices for b in indices if a != b
    }
    return PlanInputs(
        gpus=tuple(gpus),
        paths=paths,
        probe_present=probe is not None,
        numa_node_count=node_count if isinstance(node_count, int) else None,
        kernel_cmdline=str((facts.get("kernel") or {}).get("cmdline") or ""),
        probe_timestamp=(probe or {}).get("timestamp"),
    )
