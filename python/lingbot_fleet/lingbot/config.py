"""LingBot's config.yaml: the schema, validation, user overrides and a YAML writer.

Stdlib-only: the lingbot_service module runs this on nodes, which have no PyYAML. The
schema is the one docs/lingbot.md documents and LingBot enforces: unknown keys are
refused, every value has a type, topology words are nvidia-smi's, bandwidths are Gbit/s
(`*_gbps`), while LingBot's command line takes its threshold in GB/s.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GBITS_PER_GBYTE = 8
PATH_TYPE_RE = re.compile(r"NV[1-9][0-9]*|PIX|PXB|PHB|NODE|SYS")
DEVICE_RE = re.compile(r"gpu:(0|[1-9][0-9]*)")
BUS_ID_RE = re.compile(r"([0-9a-fA-F]{4}|[0-9a-fA-F]{8}):[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")

Problems = list[str]


class ConfigError(ValueError):
    """A config document or an override that LingBot would refuse; str() lists every problem."""

    def __init__(self, problems: Problems) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


# --- schema ------------------------------------------------------------------------


@dataclass(frozen=True)
class Scalar:
    """A leaf: kind is int, number, str or bool; choices/pattern/minimum narrow it."""

    kind: str
    minimum: float | None = None
    exclusive: bool = False
    choices: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    words: str = ""


@dataclass(frozen=True)
class Fields:
    """A mapping with fixed keys."""

    fields: dict[str, Any]
    required: tuple[str, ...] = ()


@dataclass(frozen=True)
class FreeMapping:
    """A mapping whose keys the user chooses (optionally matching key_pattern)."""

    value: Any
    key_pattern: re.Pattern[str] | None = None
    key_words: str = ""


@dataclass(frozen=True)
class Sequence:
    item: Any
    min_items: int = 0


_DEVICE = Scalar("str", pattern=DEVICE_RE, words="a device as 'gpu:N' (CUDA ordinal)")
_PEER_LINK = Fields(
    {
        "target_gpu_id": Scalar("int", minimum=0),
        "path_type": Scalar(
            "str",
            pattern=PATH_TYPE_RE,
            words="a topology word: NV#, PIX, PXB, PHB, NODE or SYS (nvidia-smi topo -m; "
            "write SYS for SOC)",
        ),
        "bandwidth_gbps": Scalar("number", minimum=0.0),
        "latency_ns": Scalar("number", minimum=0.0),
    },
    required=("target_gpu_id", "path_type", "bandwidth_gbps", "latency_ns"),
)
_GPU_ENTRY = Fields(
    {
        "gpu_id": Scalar("int", minimum=0),
        "bus_id": Scalar("str", pattern=BUS_ID_RE, words="a PCI bus id like 0000:81:00.0"),
        "peer_links": Sequence(_PEER_LINK),
    },
    required=("gpu_id", "bus_id"),
)
CONFIG_SCHEMA = Fields(
    {
        "hardware_profile": Fields(
            {
                "gpu_topology": Sequence(_GPU_ENTRY, min_items=1),
                "p2p_threshold_gbps": Scalar("number", minimum=0.0),
                "layer_affinity": FreeMapping(_DEVICE),
            },
            required=("gpu_topology",),
        ),
        "load_balancer": Fields(
            {
                "type": Scalar("str", choices=("adaptive", "round_robin")),
                "config": Fields(
                    {
                        "gpu_weights": FreeMapping(
                            Scalar("number", minimum=0.0, exclusive=True),
                            key_pattern=DEVICE_RE,
                            key_words="a device as 'gpu:N'",
                        )
                    }
                ),
            }
        ),
        "kv_cache_strategy": Scalar("str", choices=("p2p_direct", "host_fallback")),
        "kv_cache_sync_interval_ms": Scalar("int", minimum=1),
        "kv_cache_compression": Scalar("str", choices=("fp16", "none")),
        "debug_mode": Scalar("bool"),
    },
    required=("hardware_profile",),
)


# --- validation --------------------------------------------------------------------


def key_path(path: tuple[str | int, ...]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            text += f".{part}" if text else part
        else:
            text += f"[{part!r}]"
    return text or "(document)"


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float | str):
        return f"{type(value).__name__} {value!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _check_scalar(spec: Scalar, value: Any, where: str) -> Problems:
    if spec.kind == "bool":
        ok = isinstance(value, bool)
        return [] if ok else [f"{where}: must be true or false, got {_describe(value)}"]
    if spec.kind == "str":
        return _check_string(spec, value, where)
    return _check_number(spec, value, where)


def _check_string(spec: Scalar, value: Any, where: str) -> Problems:
    if not isinstance(value, str):
        return [f"{where}: must be a string, got {_describe(value)}"]
    if spec.choices and value not in spec.choices:
        return [f"{where}: must be one of {', '.join(spec.choices)}; got {value!r}"]
    if spec.pattern is not None and spec.pattern.fullmatch(value) is None:
        return [f"{where}: must be {spec.words}; got {value!r}"]
    return []


def _check_number(spec: Scalar, value: Any, where: str) -> Problems:
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = "an integer" if spec.kind == "int" else "a number"
        return [f"{where}: must be {kind}, got {_describe(value)}"]
    if spec.kind == "int" and not isinstance(value, int):
        return [f"{where}: must be an integer, got {_describe(value)}"]
    if not math.isfinite(value):
        return [f"{where}: must be a finite number, got {value!r}"]
    if spec.minimum is not None and (
        value < spec.minimum or (spec.exclusive and value == spec.minimum)
    ):
        relation = ">" if spec.exclusive else ">="
        return [f"{where}: must be {relation} {spec.minimum:g}, got {value!r}"]
    return []


def _check(spec: Any, value: Any, path: tuple[str | int, ...], partial: bool) -> Problems:
    where = key_path(path)
    if isinstance(spec, Scalar):
        return _check_scalar(spec, value, where)
    if isinstance(spec, Sequence):
        return _check_list(spec, value, path)
    if not isinstance(value, Mapping):
        return [f"{where}: must be a mapping, got {_describe(value)}"]
    if isinstance(spec, FreeMapping):
        return _check_free_mapping(spec, value, path)
    return _check_fields(spec, value, path, partial)


def _check_list(spec: Sequence, value: Any, path: tuple[str | int, ...]) -> Problems:
    where = key_path(path)
    if not isinstance(value, list | tuple):
        return [f"{where}: must be a list, got {_describe(value)}"]
    if len(value) < spec.min_items:
        return [f"{where}: must list at least {spec.min_items} entry"]
    problems: Problems = []
    for index, item in enumerate(value):
        problems += _check(spec.item, item, (*path, index), partial=False)
    return problems


def _check_free_mapping(
    spec: FreeMapping, value: Mapping[Any, Any], path: tuple[str | int, ...]
) -> Problems:
    where = key_path(path)
    problems: Problems = []
    for key, item in value.items():
        if not isinstance(key, str):
            problems.append(f"{where}: key {key!r} must be a string")
        elif spec.key_pattern is not None and spec.key_pattern.fullmatch(key) is None:
            problems.append(f"{where}: key {key!r} must be {spec.key_words}")
        else:
            problems += _check(spec.value, item, (*path, key), partial=False)
    return problems


def _check_fields(
    spec: Fields, value: Mapping[Any, Any], path: tuple[str | int, ...], partial: bool
) -> Problems:
    where = key_path(path)
    problems: Problems = []
    for key, item in value.items():
        if key not in spec.fields:
            known = ", ".join(spec.fields)
            problems.append(
                f"{key_path((*path, str(key)))}: unknown key {key!r}; known keys here: {known}"
            )
            continue
        problems += _check(spec.fields[key], item, (*path, key), partial)
    if not partial:
        for key in spec.required:
            if value.get(key) is None:
                problems.append(f"{where}: missing required key {key!r}")
    return problems


def _topology_problems(document: Mapping[str, Any]) -> Problems:
    """What LingBot checks across entries: unique ids and bus ids, links to known GPUs."""
    entries = document["hardware_profile"]["gpu_topology"]
    base = ("hardware_profile", "gpu_topology")
    ids = [entry["gpu_id"] for entry in entries]
    problems: Problems = []
    seen_ids: set[int] = set()
    seen_bus_ids: set[str] = set()
    for index, entry in enumerate(entries):
        bus_id = entry["bus_id"].lower()[-12:]
        if entry["gpu_id"] in seen_ids:
            problems.append(f"{key_path((*base, index, 'gpu_id'))}: gpu_id listed twice")
        if bus_id in seen_bus_ids:
            problems.append(f"{key_path((*base, index, 'bus_id'))}: bus_id listed twice")
        seen_ids.add(entry["gpu_id"])
        seen_bus_ids.add(bus_id)
        targets: set[int] = set()
        for link_index, link in enumerate(entry.get("peer_links") or []):
            where = key_path((*base, index, "peer_links", link_index, "target_gpu_id"))
            target = link["target_gpu_id"]
            if target == entry["gpu_id"]:
                problems.append(f"{where}: a GPU cannot have a peer link to itself")
            elif target not in ids:
                problems.append(f"{where}: gpu {target} has no entry in gpu_topology")
            elif target in targets:
                problems.append(f"{where}: a second peer link to gpu {target}")
            targets.add(target)
    return problems


def config_problems(document: Any) -> Problems:
    """Every reason LingBot would refuse this config document (empty when it is valid)."""
    problems = _check(CONFIG_SCHEMA, document, (), partial=False)
    return problems or _topology_problems(document)


def override_problems(overrides: Any) -> Problems:
    """Problems with an override document on its own: unknown keys and wrong types."""
    return _check(CONFIG_SCHEMA, overrides, (), partial=True)


def threshold_problems(document: Mapping[str, Any], threshold_gbytes_per_s: float) -> Problems:
    """The command line's --peer-access-threshold (GB/s) wins over p2p_threshold_gbps."""
    configured = document["hardware_profile"].get("p2p_threshold_gbps")
    expected = round(threshold_gbytes_per_s * GBITS_PER_GBYTE, 6)
    if configured is None or math.isclose(configured, expected, rel_tol=1e-9, abs_tol=1e-6):
        return []
    return [
        f"hardware_profile.p2p_threshold_gbps: {configured:g} Gbit/s disagrees with "
        f"--peer-access-threshold {threshold_gbytes_per_s:g} GB/s (= {expected:g} Gbit/s), "
        "which LingBot would use instead; change lingbot_service_p2p_min_gbytes_per_s (GB/s) "
        "rather than overriding p2p_threshold_gbps"
    ]


def merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` on top of ``base``: mappings merge key by key, anything else replaces."""
    merged: dict[str, Any] = {key: _copy(value) for key, value in base.items()}
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = _copy(value)
    return merged


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(item) for item in value]
    return value


def build_config(
    planned: Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    threshold_gbytes_per_s: float | None = None,
) -> dict[str, Any]:
    """The config LingBot gets: the plan's, overrides merged on top, validated.

    Raises ConfigError naming every problem: first the override's own (unknown keys,
    wrong types), then the merged document's.
    """
    overrides = overrides or {}
    problems = [f"override {problem}" for problem in override_problems(overrides)]
    if problems:
        raise ConfigError(problems)
    document = merge(planned, overrides)
    problems = config_problems(document)
    if not problems and threshold_gbytes_per_s is not None:
        problems = threshold_problems(document, threshold_gbytes_per_s)
    if problems:
        raise ConfigError(problems)
    return document


# --- YAML writer -------------------------------------------------------------------

_PLAIN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


# Characters a YAML reader takes as line breaks (NEL, LS, PS) or refuses as not printable
# (C1 controls, the BOM, U+FFFE/U+FFFF): written as \u escapes inside double quotes.
_YAML_UNSAFE_RE = re.compile("[\u0080-\u009f\u2028\u2029\ufeff\ufffe\uffff]")


def _string(text: str) -> str:
    if _PLAIN_RE.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    quoted = json.dumps(text, ensure_ascii=False)
    return _YAML_UNSAFE_RE.sub(lambda match: f"\\u{ord(match.group()):04x}", quoted)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write {value!r} in config.yaml: not a finite number")
        # YAML 1.1 readers (PyYAML) need a dot in every float, exponent or not.
        mantissa, e, exponent = repr(value).partition("e")
        if "." not in mantissa:
            mantissa += ".0"
        return f"{mantissa}{e}{exponent}"
    if isinstance(value, str):
        return _string(value)
    raise TypeError(f"cannot write a {type(value).__name__} in config.yaml")


@dataclass
class _Writer:
    lines: list[str] = field(default_factory=list)

    def value(self, value: Any, indent: int) -> None:
        if isinstance(value, Mapping):
            self.mapping(value, indent)
        elif isinstance(value, list | tuple):
            self.sequence(value, indent)
        else:
            raise TypeError("a document's top level must be a mapping or a list")

    def mapping(self, value: Mapping[str, Any], indent: int, first_prefix: str = "") -> None:
        pad = " " * indent
        for position, (key, item) in enumerate(value.items()):
            lead = first_prefix if position == 0 and first_prefix else pad
            self.entry(f"{lead}{_string(str(key))}:", item, indent)

    def sequence(self, value: list[Any] | tuple[Any, ...], indent: int) -> None:
        pad = " " * indent
        for item in value:
            if isinstance(item, Mapping) and item:
                self.mapping(item, indent + 2, first_prefix=f"{pad}- ")
            elif isinstance(item, list | tuple) and item:
                self.lines.append(f"{pad}-")
                self.sequence(item, indent + 2)
            else:
                self.lines.append(f"{pad}- {self.inline(item)}")

    def entry(self, head: str, item: Any, indent: int) -> None:
        if isinstance(item, Mapping) and item:
            self.lines.append(head)
            self.mapping(item, indent + 2)
        elif isinstance(item, list | tuple) and item:
            self.lines.append(head)
            self.sequence(item, indent + 2)
        else:
            self.lines.append(f"{head} {self.inline(item)}")

    @staticmethod
    def inline(item: Any) -> str:
        if isinstance(item, Mapping):
            return "{}"
        if isinstance(item, list | tuple):
            return "[]"
        return _scalar(item)


def to_yaml(document: Mapping[str, Any], header: str = "") -> str:
    """Block YAML, keys in the document's order; PyYAML and LingBot's reader agree on it."""
    writer = _Writer()
    writer.value(document, 0)
    comments = [f"# {line}".rstrip() for line in header.splitlines()]
    return "\n".join([*comments, *writer.lines]) + "\n"
