"""config.yaml: the keys LingBot knows, their types, and nothing else.

Every key outside the schema and every value of the wrong type is refused with the file,
the line and the key's path, so a rendering mistake stops the server instead of being
ignored.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path as FilePath

from .yamlsubset import Document, Path, YamlSubsetError, parse_document

PATH_TYPE_RE = re.compile(r"NV[1-9][0-9]*|PIX|PXB|PHB|NODE|SYS")
DEVICE_RE = re.compile(r"gpu:(0|[1-9][0-9]*)")
BUS_ID_RE = re.compile(
    r"([0-9a-fA-F]{4}|[0-9a-fA-F]{8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])"
)
LOAD_BALANCER_TYPES = ("adaptive", "round_robin")
KV_CACHE_STRATEGIES = ("p2p_direct", "host_fallback")
KV_CACHE_COMPRESSIONS = ("fp16", "none")

DEFAULT_LOAD_BALANCER_TYPE = "round_robin"
DEFAULT_KV_CACHE_STRATEGY = "p2p_direct"
DEFAULT_KV_CACHE_SYNC_INTERVAL_MS = 10
DEFAULT_KV_CACHE_COMPRESSION = "fp16"


class ContractError(ValueError):
    """The command line, config or environment breaks LingBot's contract."""


@dataclass(frozen=True)
class PeerLink:
    target_gpu_id: int
    path_type: str
    bandwidth_gbits_per_s: float
    latency_ns: float


@dataclass(frozen=True)
class GpuTopologyEntry:
    gpu_id: int
    bus_id: str
    peer_links: tuple[PeerLink, ...]


@dataclass(frozen=True)
class LoadBalancer:
    type: str
    gpu_weights: dict[str, float]


@dataclass(frozen=True)
class LingbotConfig:
    gpu_topology: tuple[GpuTopologyEntry, ...]
    p2p_threshold_gbits_per_s: float | None
    layer_affinity: dict[str, str]
    load_balancer: LoadBalancer
    kv_cache_strategy: str
    kv_cache_sync_interval_ms: int
    kv_cache_compression: str
    debug_mode: bool

    def topology_entry(self, gpu_id: int) -> GpuTopologyEntry | None:
        for entry in self.gpu_topology:
            if entry.gpu_id == gpu_id:
                return entry
        return None


def normalize_bus_id(bus_id: str) -> str:
    """``00000000:81:00.0`` or ``0000:81:00.0`` (any case) -> ``0000:81:00.0``."""
    match = BUS_ID_RE.fullmatch(bus_id.strip())
    if match is None:
        raise ValueError(f"{bus_id!r} is not a PCI bus id like 0000:81:00.0")
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.{function}"


def format_path(path: Path) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            text += f".{part}" if text else part
        else:
            text += f"[{part!r}]"
    return text or "(document)"


class _Reader:
    """Checks values of one parsed document and reports errors with file and line."""

    def __init__(self, source: str, document: Document) -> None:
        self.source = source
        self.document = document

    def line(self, path: Path) -> int | None:
        relative = path
        while True:
            if relative in self.document.line_of:
                return self.document.line_of[relative]
            if not relative:
                return None
            relative = relative[:-1]

    def error(self, path: Path, message: str) -> ContractError:
        line = self.line(path)
        where = f"{self.source} line {line}" if line is not None else self.source
        return ContractError(f"{where}: {format_path(path)}: {message}")

    def mapping(self, value: object, path: Path, known: tuple[str, ...]) -> dict[str, object]:
        if not isinstance(value, dict):
            raise self.error(path, f"must be a mapping, got {_describe(value)}")
        for key in value:
            if key not in known:
                raise self.error(
                    (*path, key), f"unknown key {key!r}; known keys here: {', '.join(known)}"
                )
        return value

    def required(self, mapping: dict[str, object], path: Path, key: str) -> object:
        if key not in mapping or mapping[key] is None:
            raise self.error(path, f"missing required key {key!r}")
        return mapping[key]

    def integer(self, value: object, path: Path, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(path, f"must be an integer, got {_describe(value)}")
        if value < minimum:
            raise self.error(path, f"must be >= {minimum}, got {value}")
        return value

    def number(self, value: object, path: Path, minimum: float, exclusive: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(path, f"must be a number, got {_describe(value)}")
        number = float(value)
        if not math.isfinite(number):
            raise self.error(path, f"must be a finite number, got {value}")
        if number < minimum or (exclusive and number == minimum):
            relation = ">" if exclusive else ">="
            raise self.error(path, f"must be {relation} {minimum:g}, got {value}")
        return number

    def string(self, value: object, path: Path) -> str:
        if not isinstance(value, str):
            raise self.error(path, f"must be a string, got {_describe(value)}")
        return value

    def choice(self, value: object, path: Path, choices: tuple[str, ...]) -> str:
        text = self.string(value, path)
        if text not in choices:
            raise self.error(path, f"must be one of {', '.join(choices)}; got {text!r}")
        return text

    def boolean(self, value: object, path: Path) -> bool:
        if not isinstance(value, bool):
            raise self.error(path, f"must be a boolean (true or false), got {_describe(value)}")
        return value

    def sequence(self, value: object, path: Path) -> list[object]:
        if not isinstance(value, list):
            raise self.error(path, f"must be a list, got {_describe(value)}")
        return value

    def device(self, value: object, path: Path) -> str:
        text = self.string(value, path)
        if DEVICE_RE.fullmatch(text) is None:
            raise self.error(path, f"must name a device as 'gpu:N' (CUDA ordinal), got {text!r}")
        return text

    def optional(self, mapping: dict[str, object], key: str, default: object) -> object:
        value = mapping.get(key)
        return default if value is None else value


def _describe(value: object) -> str:
    if value is None:
        return "null"
    kind = {bool: "boolean", int: "integer", float: "float", str: "string"}.get(type(value))
    if kind is not None:
        return f"{kind} {value!r}"
    return {dict: "a mapping", list: "a list"}.get(type(value), type(value).__name__)


def _peer_link(reader: _Reader, value: object, path: Path) -> PeerLink:
    known = ("target_gpu_id", "path_type", "bandwidth_gbps", "latency_ns")
    link = reader.mapping(value, path, known)
    path_type = reader.string(reader.required(link, path, "path_type"), (*path, "path_type"))
    if PATH_TYPE_RE.fullmatch(path_type) is None:
        hint = "; older drivers print SOC, write SYS" if path_type == "SOC" else ""
        raise reader.error(
            (*path, "path_type"),
            f"{path_type!r} is not a topology word; use one of NV#, PIX, PXB, PHB, NODE, SYS"
            f" (nvidia-smi topo -m legend){hint}",
        )
    return PeerLink(
        target_gpu_id=reader.integer(
            reader.required(link, path, "target_gpu_id"), (*path, "target_gpu_id"), 0
        ),
        path_type=path_type,
        bandwidth_gbits_per_s=reader.number(
            reader.required(link, path, "bandwidth_gbps"), (*path, "bandwidth_gbps"), 0.0
        ),
        latency_ns=reader.number(
            reader.required(link, path, "latency_ns"), (*path, "latency_ns"), 0.0
        ),
    )


def _gpu_entry(reader: _Reader, value: object, path: Path) -> GpuTopologyEntry:
    entry = reader.mapping(value, path, ("gpu_id", "bus_id", "peer_links"))
    gpu_id = reader.integer(reader.required(entry, path, "gpu_id"), (*path, "gpu_id"), 0)
    bus_id_text = reader.string(reader.required(entry, path, "bus_id"), (*path, "bus_id"))
    try:
        bus_id = normalize_bus_id(bus_id_text)
    except ValueError as error:
        raise reader.error((*path, "bus_id"), str(error)) from None
    links_path = (*path, "peer_links")
    links_value = reader.sequence(reader.optional(entry, "peer_links", []), links_path)
    links = tuple(
        _peer_link(reader, item, (*links_path, index)) for index, item in enumerate(links_value)
    )
    seen_targets: set[int] = set()
    for index, link in enumerate(links):
        target_path = (*links_path, index, "target_gpu_id")
        if link.target_gpu_id == gpu_id:
            raise reader.error(target_path, f"gpu {gpu_id} cannot have a peer link to itself")
        if link.target_gpu_id in seen_targets:
            raise reader.error(target_path, f"a second peer link to gpu {link.target_gpu_id}")
        seen_targets.add(link.target_gpu_id)
    return GpuTopologyEntry(gpu_id=gpu_id, bus_id=bus_id, peer_links=links)


def _gpu_topology(reader: _Reader, value: object, path: Path) -> tuple[GpuTopologyEntry, ...]:
    items = reader.sequence(value, path)
    if not items:
        raise reader.error(path, "must list at least one GPU")
    entries = tuple(_gpu_entry(reader, item, (*path, index)) for index, item in enumerate(items))
    seen_ids: set[int] = set()
    seen_bus_ids: set[str] = set()
    for index, entry in enumerate(entries):
        if entry.gpu_id in seen_ids:
            raise reader.error((*path, index, "gpu_id"), f"gpu_id {entry.gpu_id} listed twice")
        if entry.bus_id in seen_bus_ids:
            raise reader.error((*path, index, "bus_id"), f"bus_id {entry.bus_id} listed twice")
        seen_ids.add(entry.gpu_id)
        seen_bus_ids.add(entry.bus_id)
    for index, entry in enumerate(entries):
        for link_index, link in enumerate(entry.peer_links):
            if link.target_gpu_id not in seen_ids:
                raise reader.error(
                    (*path, index, "peer_links", link_index, "target_gpu_id"),
                    f"target gpu {link.target_gpu_id} has no entry in gpu_topology",
                )
    return entries


def _layer_affinity(reader: _Reader, value: object, path: Path) -> dict[str, str]:
    if not isinstance(value, dict):
        raise reader.error(path, f"must be a mapping pattern -> 'gpu:N', got {_describe(value)}")
    return {pattern: reader.device(device, (*path, pattern)) for pattern, device in value.items()}


def _load_balancer(reader: _Reader, value: object, path: Path) -> LoadBalancer:
    section = reader.mapping(value, path, ("type", "config"))
    balancer_type = reader.choice(
        reader.optional(section, "type", DEFAULT_LOAD_BALANCER_TYPE),
        (*path, "type"),
        LOAD_BALANCER_TYPES,
    )
    config_path = (*path, "config")
    config = reader.mapping(reader.optional(section, "config", {}), config_path, ("gpu_weights",))
    weights_path = (*config_path, "gpu_weights")
    weights_value = reader.optional(config, "gpu_weights", {})
    if not isinstance(weights_value, dict):
        raise reader.error(
            weights_path, f"must be a mapping 'gpu:N' -> weight, got {_describe(weights_value)}"
        )
    weights: dict[str, float] = {}
    for device, weight in weights_value.items():
        if DEVICE_RE.fullmatch(device) is None:
            raise reader.error(
                (*weights_path, device), f"keys must name a device as 'gpu:N', got {device!r}"
            )
        weights[device] = reader.number(weight, (*weights_path, device), 0.0, exclusive=True)
    return LoadBalancer(type=balancer_type, gpu_weights=weights)


TOP_LEVEL_KEYS = (
    "hardware_profile",
    "load_balancer",
    "kv_cache_strategy",
    "kv_cache_sync_interval_ms",
    "kv_cache_compression",
    "debug_mode",
)
HARDWARE_PROFILE_KEYS = ("gpu_topology", "p2p_threshold_gbps", "layer_affinity")


def config_from_document(source: str, document: Document) -> LingbotConfig:
    reader = _Reader(source, document)
    root = reader.mapping(document.value, (), TOP_LEVEL_KEYS)
    hardware_path: Path = ("hardware_profile",)
    hardware = reader.mapping(
        reader.required(root, (), "hardware_profile"), hardware_path, HARDWARE_PROFILE_KEYS
    )
    threshold_value = hardware.get("p2p_threshold_gbps")
    threshold_gbits_per_s = (
        None
        if threshold_value is None
        else reader.number(threshold_value, (*hardware_path, "p2p_threshold_gbps"), 0.0)
    )
    return LingbotConfig(
        gpu_topology=_gpu_topology(
            reader,
            reader.required(hardware, hardware_path, "gpu_topology"),
            (*hardware_path, "gpu_topology"),
        ),
        p2p_threshold_gbits_per_s=threshold_gbits_per_s,
        layer_affinity=_layer_affinity(
            reader,
            reader.optional(hardware, "layer_affinity", {}),
            (*hardware_path, "layer_affinity"),
        ),
        load_balancer=_load_balancer(
            reader, reader.optional(root, "load_balancer", {}), ("load_balancer",)
        ),
        kv_cache_strategy=reader.choice(
            reader.optional(root, "kv_cache_strategy", DEFAULT_KV_CACHE_STRATEGY),
            ("kv_cache_strategy",),
            KV_CACHE_STRATEGIES,
        ),
        kv_cache_sync_interval_ms=reader.integer(
            reader.optional(root, "kv_cache_sync_interval_ms", DEFAULT_KV_CACHE_SYNC_INTERVAL_MS),
            ("kv_cache_sync_interval_ms",),
            1,
        ),
        kv_cache_compression=reader.choice(
            reader.optional(root, "kv_cache_compression", DEFAULT_KV_CACHE_COMPRESSION),
            ("kv_cache_compression",),
            KV_CACHE_COMPRESSIONS,
        ),
        debug_mode=reader.boolean(reader.optional(root, "debug_mode", False), ("debug_mode",)),
    )


def balancer_from_document(source: str, document: Document) -> LoadBalancer:
    """A --balancer-config file: the load_balancer section, bare or under its key."""
    value = document.value
    if isinstance(value, dict) and set(value) == {"load_balancer"}:
        reader = _Reader(source, document)
        return _load_balancer(reader, value["load_balancer"], ("load_balancer",))
    return _load_balancer(_Reader(source, document), value, ())


def read_document(file_path: FilePath, what: str) -> Document:
    """Read and parse a YAML-subset (or JSON) file, or raise ContractError."""
    try:
        text = file_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ContractError(f"{what} {file_path}: file not found") from None
    except IsADirectoryError:
        raise ContractError(f"{what} {file_path}: is a directory, expected a file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ContractError(f"{what} {file_path}: cannot read: {error}") from None
    try:
        return parse_document(text)
    except YamlSubsetError as error:
        raise ContractError(f"{file_path} line {error.line_number}: {error.message}") from None


def load_config(file_path: FilePath) -> LingbotConfig:
    return config_from_document(str(file_path), read_document(file_path, "--config"))


def load_balancer_config(file_path: FilePath) -> LoadBalancer:
    return balancer_from_document(str(file_path), read_document(file_path, "--balancer-config"))
