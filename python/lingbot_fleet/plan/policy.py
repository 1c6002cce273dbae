"""Planner policy: the lingbot_service inventory variables the planner reads, with defaults.

Keys may carry the role prefix (`lingbot_service_p2p_min_gbytes_per_s`) or not.
docs/plan.md lists every key with its default and meaning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..node.findings import SEVERITIES
from .model import PlanInputError

ROLE_PREFIX = "lingbot_service_"
INSTANCE_LAYOUTS = ("auto", "per_numa", "single")
# The threshold is written as GB/s on the command line (`%g`) and x 8 as Gbit/s in
# config.yaml; with at most two decimals below this bound both read back exactly.
THRESHOLD_DECIMALS = 2
THRESHOLD_BELOW_GBYTES_PER_S = 10000.0


@dataclass(frozen=True)
class Baseline:
    """A known-good P2P matrix for one hardware model: "a-b" (GPU indices) -> GB/s."""

    model: str
    p2p_gbytes_per_s: dict[tuple[int, int], float]
    tolerance_percent: float = 15.0


@dataclass(frozen=True)
class PlanPolicy:
    p2p_min_gbytes_per_s: float = 25.0
    instance_layout: str = "auto"
    max_gpus_per_instance: int = 8
    require_same_numa: bool = True
    allow_gpus: tuple[str, ...] | None = None
    exclude_gpus: tuple[str, ...] = ()
    base_port: int = 8000
    ineligible_finding_severity: str = "critical"
    host_bandwidth_tie_percent: float = 5.0
    model_num_layers: int | None = None
    baseline: Baseline | None = None
    max_instances: int | None = None
    p2p_hysteresis_percent: float = 5.0
    figure_tolerance_percent: float = 10.0

    def to_dict(self) -> dict[str, Any]:
        baseline = None
        if self.baseline is not None:
            baseline = {
                "model": self.baseline.model,
                "p2p_gbytes_per_s": {
                    f"{a}-{b}": value
                    for (a, b), value in sorted(self.baseline.p2p_gbytes_per_s.items())
                },
                "tolerance_percent": self.baseline.tolerance_percent,
            }
        return {
            "p2p_min_gbytes_per_s": self.p2p_min_gbytes_per_s,
            "instance_layout": self.instance_layout,
            "max_gpus_per_instance": self.max_gpus_per_instance,
            "require_same_numa": self.require_same_numa,
            "allow_gpus": list(self.allow_gpus) if self.allow_gpus is not None else None,
            "exclude_gpus": list(self.exclude_gpus),
            "base_port": self.base_port,
            "ineligible_finding_severity": self.ineligible_finding_severity,
            "host_bandwidth_tie_percent": self.host_bandwidth_tie_percent,
            "model_num_layers": self.model_num_layers,
            "baseline": baseline,
            "max_instances": self.max_instances,
            "p2p_hysteresis_percent": self.p2p_hysteresis_percent,
            "figure_tolerance_percent": self.figure_tolerance_percent,
        }


POLICY_KEYS = tuple(PlanPolicy.__dataclass_fields__)


def _number(key: str, value: Any, minimum: float, *, exclusive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PlanInputError(f"policy {key}: must be a number, got {value!r}")
    if value < minimum or (exclusive and value == minimum):
        relation = ">" if exclusive else ">="
        raise PlanInputError(f"policy {key}: must be {relation} {minimum:g}, got {value!r}")
    return float(value)


def _threshold(value: Any) -> float:
    """p2p_min_gbytes_per_s: > 0, below 10000, at most two decimals (so it round-trips)."""
    key = "p2p_min_gbytes_per_s"
    number = _number(key, value, 0.0, exclusive=True)
    if number >= THRESHOLD_BELOW_GBYTES_PER_S:
        raise PlanInputError(
            f"policy {key}: must be below {THRESHOLD_BELOW_GBYTES_PER_S:g} GB/s, got {value!r}"
        )
    if round(number, THRESHOLD_DECIMALS) != number:
        raise PlanInputError(
            f"policy {key}: at most {THRESHOLD_DECIMALS} decimals (0.01 GB/s steps, so the "
            f"command line and config.yaml carry it exactly), got {value!r}; write "
            f"{round(number, THRESHOLD_DECIMALS):g}"
        )
    return number


def _percent(key: str, value: Any) -> float:
    number = _number(key, value, 0.0)
    if number >= 100:
        raise PlanInputError(f"policy {key}: must be below 100 (percent), got {value!r}")
    return number


def _integer(key: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanInputError(f"policy {key}: must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise PlanInputError(f"policy {key}: must be {bounds}, got {value}")
    return value


def _boolean(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PlanInputError(f"policy {key}: must be true or false, got {value!r}")
    return value


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise PlanInputError(f"policy {key}: must be one of {', '.join(choices)}; got {value!r}")
    return value


def _selectors(key: str, value: Any) -> tuple[str, ...]:
    """GPU selectors: UUIDs ("GPU-...") or NVML indices (int or digits), kept as text."""
    if not isinstance(value, list | tuple):
        raise PlanInputError(f"policy {key}: must be a list of GPU UUIDs or indices, got {value!r}")
    selectors = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int | str) or str(item).strip() == "":
            raise PlanInputError(
                f"policy {key}: {item!r} is neither a GPU UUID (GPU-...) nor an index (0, 1, ...)"
            )
        selectors.append(str(item).strip())
    return tuple(selectors)


def _pair_key(text: Any) -> tuple[int, int]:
    parts = str(text).split("-")
    if len(parts) != 2 or not all(part.strip().isdigit() for part in parts):
        raise PlanInputError(
            f"policy baseline.p2p_gbytes_per_s: key {text!r} must name a GPU pair as 'a-b' "
            "(NVML indices, e.g. '0-1')"
        )
    a, b = (int(part) for part in parts)
    if a == b:
        raise PlanInputError(
            f"policy baseline.p2p_gbytes_per_s: key {text!r} pairs a GPU with itself"
        )
    return (min(a, b), max(a, b))


def _baseline(value: Any) -> Baseline | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise PlanInputError(
            "policy baseline: must be a mapping with model, p2p_gbytes_per_s and tolerance_percent"
        )
    unknown = sorted(set(value) - {"model", "p2p_gbytes_per_s", "tolerance_percent"})
    if unknown:
        raise PlanInputError(
            f"policy baseline: unknown key {unknown[0]!r}; known keys: model, p2p_gbytes_per_s, "
            "tolerance_percent"
        )
    model = value.get("model")
    if not isinstance(model, str) or not model:
        raise PlanInputError(
            "policy baseline.model: must name the GPU model, e.g. 'NVIDIA RTX A6000'"
        )
    matrix = value.get("p2p_gbytes_per_s")
    if not isinstance(matrix, Mapping) or not matrix:
        raise PlanInputError(
            "policy baseline.p2p_gbytes_per_s: must map GPU pairs to GB/s, e.g. {'0-1': 28.4}"
        )
    pairs = {
        _pair_key(text): _number(f"baseline.p2p_gbytes_per_s[{text}]", figure, 0.0, exclusive=True)
        for text, figure in matrix.items()
    }
    tolerance = _number("baseline.tolerance_percent", value.get("tolerance_percent", 15), 0.0)
    return Baseline(model=model, p2p_gbytes_per_s=pairs, tolerance_percent=tolerance)


def policy_from_mapping(values: Mapping[str, Any] | None) -> PlanPolicy:
    """A validated PlanPolicy; PlanInputError names the key, the value and what is allowed."""
    if values is not None and not isinstance(values, Mapping):
        raise PlanInputError(f"policy: expected a mapping of policy keys, got {values!r}")
    raw = {}
    for key, value in (values or {}).items():
        name = key[len(ROLE_PREFIX) :] if key.startswith(ROLE_PREFIX) else key
        if name not in POLICY_KEYS:
            raise PlanInputError(
                f"policy: unknown key {key!r}; known keys: {', '.join(POLICY_KEYS)}"
            )
        raw[name] = value
    defaults = PlanPolicy()
    allow = raw.get("allow_gpus")
    num_layers = raw.get("model_num_layers")
    max_instances = raw.get("max_instances")
    return PlanPolicy(
        p2p_min_gbytes_per_s=_threshold(
            raw.get("p2p_min_gbytes_per_s", defaults.p2p_min_gbytes_per_s)
        ),
        instance_layout=_choice(
            "instance_layout",
            raw.get("instance_layout", defaults.instance_layout),
            INSTANCE_LAYOUTS,
        ),
        max_gpus_per_instance=_integer(
            "max_gpus_per_instance",
            raw.get("max_gpus_per_instance", defaults.max_gpus_per_instance),
            1,
            64,
        ),
        require_same_numa=_boolean(
            "require_same_numa", raw.get("require_same_numa", defaults.require_same_numa)
        ),
        allow_gpus=_selectors("allow_gpus", allow) if allow is not None else None,
        exclude_gpus=_selectors("exclude_gpus", raw.get("exclude_gpus") or []),
        base_port=_integer("base_port", raw.get("base_port", defaults.base_port), 1, 65535),
        ineligible_finding_severity=_choice(
            "ineligible_finding_severity",
            raw.get("ineligible_finding_severity", defaults.ineligible_finding_severity),
            SEVERITIES,
        ),
        host_bandwidth_tie_percent=_number(
            "host_bandwidth_tie_percent",
            raw.get("host_bandwidth_tie_percent", defaults.host_bandwidth_tie_percent),
            0.0,
        ),
        model_num_layers=_integer("model_num_layers", num_layers, 1)
        if num_layers is not None
        else None,
        baseline=_baseline(raw.get("baseline")),
        max_instances=_integer("max_instances", max_instances, 1, 64)
        if max_instances is not None
        else None,
        p2p_hysteresis_percent=_percent(
            "p2p_hysteresis_percent",
            raw.get("p2p_hysteresis_percent", defaults.p2p_hysteresis_percent),
        ),
        figure_tolerance_percent=_percent(
            "figure_tolerance_percent",
            raw.get("figure_tolerance_percent", defaults.figure_tolerance_percent),
        ),
    )
