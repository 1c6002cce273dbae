"""A node's gate outcome as the rollout records it: the rollback sentence, the result the
summary reads (`rollout_gate_result`) and the message that fails the node; and the
playbook's own settings checked before any node changes. Pure, standard library only."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

NOTHING_TO_ROLL_BACK = "nothing to roll back: this run changed no file on the node"
_WHOLE_NUMBER = re.compile(r"^[0-9]+$")


def max_fail_percentage_problem(value: Any) -> str | None:
    """Why `rollout_max_fail_percentage` cannot be the change play's max_fail_percentage
    (None: it can): a whole percentage from 0 to 100, as a number or its digits."""
    text = str(value)
    if not isinstance(value, bool) and _WHOLE_NUMBER.match(text) and int(text) <= 100:
        return None
    return (
        "rollout_max_fail_percentage must be a whole percentage from 0 to 100 (0 stops the "
        f"rollout at the first node that fails its gate); got {value}"
    )


def _generation(value: Any) -> int | None:
    if value is None or value == "" or isinstance(value, bool):
        return None
    return int(value)


def rollback_text(
    committed: Any,
    rollback_generation: Any = None,
    reboot_required: bool = False,
    kernel_cmdline_reboot: str = "never",
) -> str:
    """What the rollback of a failed node did: `committed` is this run's generation
    (``generations_committed``; None: the run changed no file), `rollback_generation` the
    generation the rollback was recorded as, `reboot_required` whether the restored files
    need a reboot the rollback did not make (it makes it when `kernel_cmdline_reboot` is
    ``if_required``)."""
    generation = _generation(committed)
    if generation is None:
        return NOTHING_TO_ROLL_BACK
    recorded = _generation(rollback_generation)
    text = (
        f"rolled back: generation {generation} undone, node back to generation "
        f"{generation - 1} (the rollback recorded as generation "
        f"{'-' if recorded is None else recorded})"
    )
    if reboot_required and kernel_cmdline_reboot != "if_required":
        text += ", reboot required"
    return text


def gate_result(gate: Mapping[str, Any], rollback: str | None) -> dict[str, Any]:
    """The node's `rollout_gate_result`: the judged gate with what the rollback did, and
    `failure`, the message that fails the node (None: it passed)."""
    result = dict(gate)
    result["rollback"] = rollback
    result["failure"] = (
        None
        if result.get("passed")
        else f"{result.get('message')}; {rollback or 'not rolled back'}"
    )
    return result


def batch_plan_of_hosts(host_plans: Iterable[Any]) -> Mapping[str, Any] | None:
    """The rollout's batch plan from the hosts' `rollout_gate_batch_plan` in inventory
    order (the first play gives every host the same one); None when no host has one (the
    first play stopped before it was made)."""
    for plan in host_plans:
        if isinstance(plan, Mapping):
            return plan
    return None
