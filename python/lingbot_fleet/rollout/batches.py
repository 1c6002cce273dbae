"""Rollout batches: the batch list checked and computed exactly as Ansible's serial runs it.

Pure, standard library only. `playbooks/rollout.yml` hands the batch list to Ansible's
`serial` unchanged; this module validates it (Ansible would silently turn `0` into "all
remaining hosts" and crash on `"5.5%"`) and computes the same batches Ansible will run,
so every node's batch number is known before the first one changes. Ansible's rule: a
percentage is of the whole play's host count, rounded down, at least 1; a number is a
host count; the last item repeats until every host has had its turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

DEFAULT_BATCHES: tuple[int | str, ...] = (1, "5%", "20%", "100%")
_PERCENT = re.compile(r"^([0-9]+)%$")
_COUNT = re.compile(r"^[0-9]+$")


class BatchSpecError(ValueError):
    """The batch list cannot be used as the rollout's `serial`."""


def _batch_item(item: Any, position: int) -> int | str:
    where = f"rollout_batches item {position + 1} ({item!r})"
    if isinstance(item, bool) or not isinstance(item, int | str):
        raise BatchSpecError(f"{where}: use a host count (1, 2, ...) or a percentage ('20%')")
    if isinstance(item, int):
        if item < 1:
            raise BatchSpecError(
                f"{where}: a batch needs at least 1 host (Ansible would run every remaining "
                "host at once for 0 or less); use 1 or more, or '100%' for all the rest"
            )
        return item
    text = item.strip()
    if _COUNT.match(text):
        return _batch_item(int(text), position)
    match = _PERCENT.match(text)
    if match is None:
        raise BatchSpecError(
            f"{where}: not a host count or a whole percentage; write e.g. 5 or '20%'"
        )
    percent = int(match.group(1))
    if not 1 <= percent <= 100:
        raise BatchSpecError(f"{where}: a percentage must be from 1% to 100%")
    return f"{percent}%"


def parse_batch_spec(spec: Any) -> list[int | str]:
    """The batch list, checked and normalized (counts as int, percentages as 'N%').

    Accepts a list, or one count or percentage on its own (as `serial` does)."""
    if isinstance(spec, str) and spec.strip().startswith("["):
        raise BatchSpecError(
            f"rollout_batches arrived as the text {spec!r}, not a list; pass it as JSON: "
            """-e '{"rollout_batches": [1, "5%", "20%", "100%"]}'"""
        )
    items = [spec] if isinstance(spec, int | str) and not isinstance(spec, bool) else spec
    if not isinstance(items, list | tuple) or len(items) == 0:
        raise BatchSpecError(
            f"rollout_batches must be a non-empty list of host counts and percentages, "
            f"e.g. [1, '5%', '20%', '100%']; got {spec!r}"
        )
    return [_batch_item(item, position) for position, item in enumerate(items)]


def batch_size(item: int | str, host_count: int) -> int:
    """Hosts in a batch of this item, for a play of `host_count` hosts (Ansible's rule)."""
    if isinstance(item, str) and item.endswith("%"):
        return int(int(item[:-1]) / 100.0 * host_count) or 1
    return int(item)


def batch_sizes(spec: Any, host_count: int) -> list[int]:
    """The size of every batch Ansible runs for `host_count` hosts, in order."""
    items = parse_batch_spec(spec)
    sizes: list[int] = []
    remaining = host_count
    position = 0
    while remaining > 0:
        size = min(batch_size(items[position], host_count), remaining)
        sizes.append(size)
        remaining -= size
        position = min(position + 1, len(items) - 1)
    return sizes


def assign_batches(spec: Any, hosts: Sequence[str]) -> list[list[str]]:
    """The hosts of every batch, in the play's host order."""
    batches: list[list[str]] = []
    start = 0
    for size in batch_sizes(spec, len(hosts)):
        batches.append(list(hosts[start : start + size]))
        start += size
    return batches


def batch_plan(spec: Any, hosts: Sequence[str]) -> dict[str, Any]:
    """What rollout.yml stores as `rollout_gate_batch_plan`: spec, sizes, batches, batch_of."""
    batches = assign_batches(spec, hosts)
    return {
        "spec": parse_batch_spec(spec),
        "sizes": [len(batch) for batch in batches],
        "batches": batches,
        "batch_of": {host: number for number, batch in enumerate(batches, 1) for host in batch},
    }
