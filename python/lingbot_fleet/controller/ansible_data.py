"""Values as Ansible hands them to controller code, made plain."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def plain_data(value: Any) -> Any:
    """Plain dicts, lists and scalars from mappings and sequences of any subtype."""
    if isinstance(value, Mapping):
        return {str(key): plain_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain_data(item) for item in value]
    if isinstance(value, bool) or value is None:
        return value
    for kind in (int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def expanded_on_node(values: Iterable[Any]) -> bool:
    """Whether a value holds ``~`` or ``$``: a path option the node expands (its home, its
    environment), which an action plugin must not decide on the controller."""
    return any("~" in str(value) or "$" in str(value) for value in values)


def controller_options(task: Any, args: Mapping[str, Any], spec: Mapping[str, Any]) -> dict | None:
    """The task's options named in ``spec``, validated as the module validates them, when
    an action plugin may answer for its module on the controller; None for a delegated or
    async task, an option the node expands (``expanded_on_node``), or options the module
    would refuse (it then fails with its own message)."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator  # noqa: PLC0415

    if task.delegate_to or task.async_val:
        return None
    options = {key: value for key, value in plain_data(args).items() if key in spec}
    if expanded_on_node(options.values()):
        return None
    validated = ArgumentSpecValidator(dict(spec)).validate(options)
    if validated.error_messages:
        return None
    return validated.validated_parameters
