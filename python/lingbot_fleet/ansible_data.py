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
