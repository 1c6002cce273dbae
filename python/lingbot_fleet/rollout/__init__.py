"""Gated batch rollout: the batches (``batches``), the gates a node passes after its
change (``gates``; ``service_load`` judges the chat load of ``lingbot_fleet.lingbot.chat_load``),
the gate inputs as Ansible hands them (``inputs``), the outcome the rollout keeps
(``outcome``) and the summary (``summary``). Pure,
standard library only; docs in roles/rollout_gate/README.md.
"""

from __future__ import annotations

from .batches import (
    DEFAULT_BATCHES,
    BatchSpecError,
    assign_batches,
    batch_plan,
    batch_size,
    batch_sizes,
    parse_batch_spec,
)
from .gates import (
    GATES,
    LINK_FAIL_ON_CHOICES,
    SEVERITIES,
    GateFailure,
    GateInputs,
    GatePolicy,
    GateReport,
    HealthResult,
    evaluate_gates,
    gate_failures,
    health_gate,
    link_gate,
    probe_paths_gate,
    regression_gate,
    service_load_gate,
)
from .inputs import (
    NodeReading,
    failure_text,
    health_from_results,
    node_reading,
    parse_previous_probe,
    previous_probe_reading,
    task_failure,
)
from .outcome import batch_plan_of_hosts, gate_result, max_fail_percentage_problem, rollback_text
from .summary import summarize

__all__ = [
    "DEFAULT_BATCHES",
    "GATES",
    "LINK_FAIL_ON_CHOICES",
    "SEVERITIES",
    "BatchSpecError",
    "GateFailure",
    "GateInputs",
    "GatePolicy",
    "GateReport",
    "HealthResult",
    "NodeReading",
    "assign_batches",
    "batch_plan",
    "batch_plan_of_hosts",
    "batch_size",
    "batch_sizes",
    "evaluate_gates",
    "failure_text",
    "gate_failures",
    "gate_result",
    "health_from_results",
    "health_gate",
    "link_gate",
    "max_fail_percentage_problem",
    "node_reading",
    "parse_batch_spec",
    "parse_previous_probe",
    "previous_probe_reading",
    "probe_paths_gate",
    "regression_gate",
    "rollback_text",
    "service_load_gate",
    "summarize",
    "task_failure",
]
