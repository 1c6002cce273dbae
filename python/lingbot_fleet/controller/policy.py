"""Validate inventory and extra-vars against every role's argument specs, early.

Each role declares its public variables in `roles/<role>/meta/argument_specs.yml`; a
variable whose name starts with a role's name is that role's. The check refuses wrong
types and values, unknown names (with the closest known name), removed names (with what
replaced them) and contradictions between variables, before any play touches a node.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ..node import values
from ..node.findings import FINDING_SEVERITY_VARIABLE, severity_overrides

# Variables that existed once: name -> what to use instead.
_FIXED_LAYOUT = (
    "LingBot's files are always where lingbot_layout puts them (/etc/lingbot/plan.json, "
    "/etc/lingbot/<instance>/); remove the variable"
)
REMOVED_VARIABLES: dict[str, str] = {
    "generations_plan_path": _FIXED_LAYOUT,
    "fleet_audit_plan_path": _FIXED_LAYOUT,
    "fleet_audit_lingbot_dir": _FIXED_LAYOUT,
    "p2p_probe_plan_path": _FIXED_LAYOUT,
}

# Variables a playbook reads in play keywords (serial): Ansible templates those before any
# host's inventory variables exist, so only -e reaches them.
PLAY_WIDE_VARIABLES: dict[str, str] = {
    "kernel_cmdline_reboot_batch": (
        "the batch size of the rolling reboot (provision.yml, rollback.yml)"
    ),
}

# Directories the toolkit creates, writes, chmods and prunes: each value must be one the
# toolkit may own (values.owned_dir), the same check the modules make on the node.
OWNED_DIR_VARIABLES = (
    "generations_dir",
    "fleet_audit_generations_dir",
    "kernel_cmdline_backup_dir",
    "p2p_probe_save_dir",
    "rollout_gate_probe_save_dir",
)
# Directory variables that name a directory shared with other software: the toolkit puts
# files into it and owns none of it.
SHARED_DIR_VARIABLES = (
    "nvidia_persistence_dropin_dir",  # systemd's drop-in directory of nvidia-persistenced
    "topo_monitor_textfile_dir",  # node_exporter's textfile collector directory
)

Contradiction = Callable[[Mapping[str, Any]], list[str]]
CONTRADICTIONS: dict[str, Contradiction] = {}

# Variables checked by their kind's validator (lingbot_fleet.node.values), the same one the
# module that writes the value calls. Typed ones see the value as the argument spec
# converts it (extra-vars arrive as text); raw ones see it as given, since the spec's
# str would turn a mapping into its Python repr.
Validator = Callable[[Any, str], Any]
TYPED_VALUE_CHECKS: dict[str, Validator] = {
    "lingbot_service_user": values.posix_name,
    "lingbot_service_group": values.posix_name,
    "lingbot_service_listen_host": values.listen_host,
    "lingbot_service_health_host": values.listen_host,
    "lingbot_service_base_port": values.tcp_port,
}
TYPED_LIST_CHECKS: dict[str, Validator] = {
    "lingbot_service_device_groups": values.posix_name,
}
RAW_VALUE_CHECKS: dict[str, Validator] = {
    "lingbot_service_api_key": values.api_key,
}
# An unknown name one edit from a known one (insert, delete, replace, swap of two
# neighbours; case ignored) is a typo of it: the value would be ignored and the known
# variable keep its default, silently.
NEAR_MISS_EDITS = 1


@dataclass(frozen=True)
class PolicyProblem:
    variable: str
    message: str

    def __str__(self) -> str:
        return f"{self.variable}: {self.message}"


def contradiction(role: str) -> Callable[[Contradiction], Contradiction]:
    def register(check: Contradiction) -> Contradiction:
        CONTRADICTIONS[role] = check
        return check

    return register


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_role_specs(roles_dir: Path) -> dict[str, dict[str, Any]]:
    """Role name -> the `main` entry point's options from meta/argument_specs.yml."""
    specs: dict[str, dict[str, Any]] = {}
    for spec_file in sorted(roles_dir.glob("*/meta/argument_specs.yml")):
        # Once per host in a worker: libyaml's loader, when PyYAML has it, is ten times faster.
        document = yaml.load(spec_file.read_text(), Loader=_SAFE_LOADER) or {}
        entry = document.get("argument_specs", {}).get("main", {})
        specs[spec_file.parent.parent.name] = entry.get("options", {})
    return specs


def _role_of(name: str, roles: list[str]) -> str | None:
    matches = [role for role in roles if name.startswith(f"{role}_")]
    return max(matches, key=len) if matches else None


def check_policy(
    variables: Mapping[str, Any], role_specs: Mapping[str, Mapping[str, Any]]
) -> list[PolicyProblem]:
    """Return every problem with the role variables among `variables` (empty when fine)."""
    problems: list[PolicyProblem] = []
    for name, replacement in REMOVED_VARIABLES.items():
        if name in variables:
            problems.append(PolicyProblem(name, f"was removed; {replacement}"))
    roles = sorted(role_specs)
    by_role: dict[str, dict[str, Any]] = {role: {} for role in roles}
    for name, value in variables.items():
        role = _role_of(name, roles)
        if role is not None and name not in REMOVED_VARIABLES:
            by_role[role][name] = value
    problems += unsafe_value_problems(variables, role_specs)
    problems += near_miss_problems(variables, role_specs)
    problems += checked_value_problems(variables)

    problems += owned_dir_problems(variables)
    for role, params in by_role.items():
        spec = dict(role_specs[role])
        for name in sorted(set(params) - set(spec)):
            close = difflib.get_close_matches(name, list(spec), n=1)
            hint = f"did you mean {close[0]}?" if close else "no such variable"
            problems.append(
                PolicyProblem(
                    name,
                    f"unknown variable of role {role} ({hint} see roles/{role}/README.md)",
                )
            )
            params.pop(name)
        raw_problems = _value_problems(params, RAW_VALUE_CHECKS, {})
        problems += raw_problems
        for problem in raw_problems:
            params.pop(problem.variable)
        result = ArgumentSpecValidator(spec).validate(dict(params))
        for error in result.errors:
            message = str(error)
            variable = next((n for n in sorted(spec, key=len, reverse=True) if n in message), role)
            problems.append(
                PolicyProblem(variable, f"{message} (fix it in the inventory or -e; role {role})")
            )
        if not result.error_messages:
            typed = {name: result.validated_parameters[name] for name in params}
            value_problems = _value_problems(typed, TYPED_VALUE_CHECKS, TYPED_LIST_CHECKS)
            problems += value_problems
            if value_problems:
                continue
        check = CONTRADICTIONS.get(role)
        if check is not None and not result.error_messages and not raw_problems:
            merged = {**_defaults(spec), **params}
            problems.extend(PolicyProblem(role, message) for message in check(merged))
    return problems


def _value_problems(
    params: Mapping[str, Any],
    checks: Mapping[str, Validator],
    list_checks: Mapping[str, Validator],
) -> list[PolicyProblem]:
    problems = []
    for name in sorted(params):
        value = params[name]
        try:
            if name in checks:
                checks[name](value, name)
            elif name in list_checks and isinstance(value, list):
                for index, item in enumerate(value):
                    list_checks[name](item, f"{name}[{index}]")
        except ValueError as error:
            variable, _colon, message = str(error).partition(": ")
            if not _colon or not variable.startswith(name):
                variable, message = name, str(error).removeprefix(f"{name} ")
            problems.append(PolicyProblem(variable, message))
    return problems


def _edits_within(first: str, second: str, limit: int) -> bool:
    """Whether at most ``limit`` edits (insert, delete, replace, swap of neighbours) turn
    ``first`` into ``second``; a band of the optimal string alignment table."""
    if abs(len(first) - len(second)) > limit:
        return False
    previous2: list[int] = []
    previous = list(range(len(second) + 1))
    for i in range(1, len(first) + 1):
        current = [i] + [limit + 1] * len(second)
        for j in range(max(1, i - limit), min(len(second), i + limit) + 1):
            cost = 0 if first[i - 1] == second[j - 1] else 1
            best = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and first[i - 1] == second[j - 2] and first[i - 2] == second[j - 1]:
                best = min(best, previous2[j - 2] + 1)
            current[j] = best
        if min(current) > limit:
            return False
        previous2, previous = previous, current
    return previous[len(second)] <= limit


def _deletions(name: str, depth: int) -> set[str]:
    found = {name}
    for _step in range(depth):
        found |= {word[:i] + word[i + 1 :] for word in found for i in range(len(word))}
    return found


@functools.lru_cache(maxsize=4)
def _deletion_index(known: frozenset[str]) -> dict[str, frozenset[str]]:
    """Each known name, less up to one character -> the names it comes from (built once
    per set of role specs: every host of a run asks with the same one)."""
    index: dict[str, set[str]] = {}
    for name in known:
        for variant in _deletions(name.lower(), NEAR_MISS_EDITS):
            index.setdefault(variant, set()).add(name)
    return {variant: frozenset(names) for variant, names in index.items()}


def near_miss_problems(
    variables: Mapping[str, Any], role_specs: Mapping[str, Mapping[str, Any]]
) -> list[PolicyProblem]:
    """Unknown names that are a typo of a role variable, also where the typo is in the role
    prefix (lingbot_servce_api_key): refused with "did you mean <name>?".

    Names under a role's prefix are checked per role in check_policy; this covers the rest.
    Candidates come from shared deletions (each name less up to one character: one edit
    leaves the two names a deletion in common), so the check costs a few set lookups per
    name, whatever the number of role variables.
    """
    roles = sorted(role_specs)
    known = {name for spec in role_specs.values() for name in spec} | set(PLAY_WIDE_VARIABLES)
    index = _deletion_index(frozenset(known))
    problems = []
    for name in sorted(variables):
        if name in known or name in REMOVED_VARIABLES or _role_of(name, roles) is not None:
            continue
        candidates: set[str] = set()
        for variant in _deletions(name.lower(), NEAR_MISS_EDITS):
            candidates |= index.get(variant, frozenset())
        close = sorted(c for c in candidates if _edits_within(name.lower(), c, NEAR_MISS_EDITS))
        if close:
            role = _role_of(close[0], roles)
            where = f" see roles/{role}/README.md" if role else ""
            problems.append(
                PolicyProblem(
                    name,
                    f"unknown variable, a near miss of a role variable (did you mean "
                    f"{close[0]}?{where}); as it is, its value is ignored and {close[0]} keeps "
                    "its default. Rename it",
                )
            )
    return problems


# Characters no inventory value may hold: they end a line in a unit file, an environment
# file or a shell word (newline injection), or are invisible in a review.
_CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")
# Names whose values become one word of a unit file or a command line (paths, users,
# commands): no whitespace, no systemd specifier (%), no systemd command prefix.
_WORD_NAMES = re.compile(r"_(path|dir|python|pythonpath|entry|numactl|user|group|name)$")
_WORD_PREFIXES = ("+", "!", "-", "@", ":", "|")


def _text_values(value: Any, where: str) -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [(where, value)]
    if isinstance(value, list | tuple):
        return [item for i, v in enumerate(value) for item in _text_values(v, f"{where}[{i}]")]
    if isinstance(value, Mapping):
        return [item for k, v in value.items() for item in _text_values(v, f"{where}.{k}")]
    return []


def unsafe_value_problems(
    variables: Mapping[str, Any], role_specs: Mapping[str, Mapping[str, Any]]
) -> list[PolicyProblem]:
    """Role variables whose text would break out of the unit, file or command it lands in."""
    problems: list[PolicyProblem] = []
    known = {name: spec for specs in role_specs.values() for name, spec in specs.items()}
    for name in sorted(set(variables) & set(known)):
        spec = known[name]
        word = spec.get("type") == "path" or bool(_WORD_NAMES.search(name))
        for where, text in _text_values(variables[name], name):
            control = _CONTROL.search(text)
            if control:
                problems.append(
                    PolicyProblem(
                        where,
                        f"holds the control character {control.group()!r} at position "
                        f"{control.start()}; remove it (values land in unit files and commands, "
                        "where a line break starts a new directive)",
                    )
                )
                continue
            if not word:
                continue
            if any(ch.isspace() for ch in text):
                problems.append(
                    PolicyProblem(where, f"{text!r} holds whitespace; give one word (path or name)")
                )
            elif "%" in text:
                problems.append(
                    PolicyProblem(
                        where, f"{text!r} holds '%', which systemd expands in unit files; remove it"
                    )
                )
            elif text.startswith(_WORD_PREFIXES):
                problems.append(
                    PolicyProblem(
                        where,
                        f"{text!r} starts with {text[0]!r}, which systemd reads as a command "
                        "prefix; give the path or name itself",
                    )
                )
    return problems


def _checked(check: Callable[[Any, str], Any]) -> Callable[[Mapping[str, Any], str], None]:
    def run(variables: Mapping[str, Any], name: str) -> None:
        check(variables[name], name)

    return run


def _kernel_parameters(variables: Mapping[str, Any], name: str) -> None:
    from ..boot.kernel_options import check_values  # noqa: PLC0415 - only for this role

    present = variables.get("kernel_cmdline_present") or {}
    absent = variables.get("kernel_cmdline_absent") or []
    allow = variables.get("kernel_cmdline_allow_risky_params") or []
    shapes = isinstance(present, Mapping) and isinstance(absent, list) and isinstance(allow, list)
    if shapes and all(isinstance(entry, str) for entry in [*absent, *allow]):
        check_values(present, absent, "lingbot-fleet", allow)


# Variables whose value the module (or the play) that uses it checks with the same
# validator (lingbot_fleet.node.values): refused here first, with the same message.
CHECKED_VARIABLES: dict[str, Callable[[Mapping[str, Any], str], None]] = {
    "kernel_cmdline_dropin_name": _checked(values.file_name),
    "kernel_cmdline_reboot_batch": _checked(values.batch_size),
    "kernel_cmdline_present": _kernel_parameters,
    "kernel_cmdline_absent": _kernel_parameters,
    "kernel_cmdline_allow_risky_params": _kernel_parameters,
    "pcie_acs_setpci": _checked(values.command),
    "gpu_facts_nvml_package": _checked(values.pip_requirement),
    # gpu_checks, the audit and the monitor apply it to every finding they judge.
    FINDING_SEVERITY_VARIABLE: _checked(severity_overrides),
}


def checked_value_problems(variables: Mapping[str, Any]) -> list[PolicyProblem]:
    """Values a module, action or play refuses (``CHECKED_VARIABLES``), each once, with the
    message it gives there."""
    problems: dict[str, PolicyProblem] = {}
    for name, check in CHECKED_VARIABLES.items():
        if name not in variables:
            continue
        try:
            check(variables, name)
        except values.ValueRefusedError as error:
            problems.setdefault(str(error), PolicyProblem(error.variable, error.reason))
    return list(problems.values())


def owned_dir_problems(variables: Mapping[str, Any]) -> list[PolicyProblem]:
    """Directory variables whose value is not a directory the toolkit may own."""
    problems = []
    for name in OWNED_DIR_VARIABLES:
        if name not in variables or (
            isinstance(variables[name], str) and _CONTROL.search(variables[name])
        ):
            continue  # a control character is reported once, by unsafe_value_problems
        try:
            values.owned_dir(variables[name], name)
        except ValueError as error:
            variable, _separator, message = str(error).partition(": ")
            problems.append(PolicyProblem(variable, message))
    return problems


def play_wide_problems(
    variables: Mapping[str, Any], extra_vars: Mapping[str, Any]
) -> list[PolicyProblem]:
    """Play-wide variables set where the play keyword cannot see them (not with -e)."""
    return [
        PolicyProblem(
            name,
            f"is set in the inventory, but it is {meaning}, which Ansible reads before any "
            f"inventory variable; the inventory value would be ignored. Remove it there and "
            f"pass it with -e {name}=<value>",
        )
        for name, meaning in PLAY_WIDE_VARIABLES.items()
        if name in variables and name not in extra_vars
    ]


@contradiction("lingbot_service")
def _lingbot_service_contradictions(variables: Mapping[str, Any]) -> list[str]:
    try:
        values.service_exposure(
            variables["lingbot_service_listen_host"],
            variables["lingbot_service_api_key"],
            variables["lingbot_service_health_host"],
        )
    except ValueError as error:
        return [str(error)]
    return []


def _defaults(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {name: option["default"] for name, option in spec.items() if "default" in option}


@contradiction("kernel_cmdline")
def _kernel_cmdline_contradictions(variables: Mapping[str, Any]) -> list[str]:
    from ..boot.cmdline import PolicyError, build_policy  # noqa: PLC0415 - only for this role

    present = dict(variables.get("kernel_cmdline_present") or {})
    booleans = [key for key, value in present.items() if isinstance(value, bool)]
    if booleans:
        return [
            f"kernel_cmdline_present.{key} is the YAML boolean {present[key]} (YAML reads "
            f'on, off, yes and no as booleans); quote the value, e.g. {key}: "on"'
            for key in booleans
        ]
    absent = variables.get("kernel_cmdline_absent") or []
    empty = [str(i) for i, item in enumerate(absent) if item is None or not str(item).strip()]
    if empty:
        return [
            f"kernel_cmdline_absent[{', '.join(empty)}] is empty; give each parameter to remove "
            "as name or name=value"
        ]
    if variables.get("kernel_cmdline_pcie_aspm_off"):
        present["pcie_aspm"] = "off"
    try:
        build_policy(present, variables.get("kernel_cmdline_absent") or [])
    except PolicyError as error:
        return [f"kernel_cmdline_present/kernel_cmdline_absent: {error}"]
    return []


def typed_role_variables(
    role_spec: Mapping[str, Any], variables: Mapping[str, Any]
) -> dict[str, Any]:
    """The role's variables among `variables`, converted to the types its spec declares.

    Extra-vars arrive as strings (`-e lingbot_service_p2p_min_gbytes_per_s=30`); Ansible's
    own role validation checks them but hands the task the raw value, so controller code
    that computes with them converts them the same way. Raises ValueError naming the
    variable when one does not convert.
    """
    known = {name: value for name, value in variables.items() if name in role_spec}
    result = ArgumentSpecValidator(dict(role_spec)).validate(known)
    if result.error_messages:
        raise ValueError("; ".join(result.error_messages))
    return {name: result.validated_parameters[name] for name in known}
