"""Run a role's module in this process on a temp root, and list what a temp root holds.

A module is loaded from roles/<role>/library/<name>.py (tests/conftest.py maps
ansible.module_utils.lingbot_fleet onto the tested package) and its run_module() is called
with the arguments Ansible would pass; exit_json and fail_json become the returned result.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

REPO = Path(__file__).resolve().parents[2]
_LOADED: dict[str, ModuleType] = {}
# The rules cmdline.build_policy states for kernel parameter names and values.
NAME_RULE = (
    "a name is letters, digits, '_', '-' and '.', starting with a letter, digit or '_'. "
    "Fix the name in the policy."
)
VALUE_RULE = (
    "values must not contain whitespace, quotes, '$', '`', '\\\\', ';' or '#'. Fix the value "
    "in the policy."
)


def role_module(role: str, name: str) -> ModuleType:
    """roles/<role>/library/<name>.py, loaded once."""
    if name not in _LOADED:
        path = REPO / "roles" / role / "library" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"malformed_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        _LOADED[name] = module
    return _LOADED[name]


class _ModuleExitError(Exception):
    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result.get("msg", ""))
        self.result = result


def run_module(
    monkeypatch: pytest.MonkeyPatch,
    module: ModuleType,
    args: dict[str, Any],
    *,
    check_mode: bool = False,
) -> dict[str, Any]:
    """What the module returns for ``args``, with ``failed`` set."""

    def exit_json(self: Any, **result: Any) -> None:
        raise _ModuleExitError({"failed": False, **result})

    def fail_json(self: Any, msg: str, **result: Any) -> None:
        raise _ModuleExitError({"failed": True, "msg": msg, **result})

    monkeypatch.setattr(module.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(module.AnsibleModule, "fail_json", fail_json)
    with patch_module_args({**args, "_ansible_check_mode": check_mode}):
        try:
            module.run_module()
        except _ModuleExitError as done:
            return json.loads(json.dumps(done.result, default=str))
    raise AssertionError("the module returned without exit_json or fail_json")


def checksums(root: Path) -> dict[str, str]:
    """Every entry under root -> its kind, mode and (for a file) sha256."""
    listing = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        name = "/" + str(path.relative_to(root))
        if path.is_symlink():
            listing[name] = f"link {os.readlink(path)}"
        elif path.is_dir():
            listing[name] = f"dir {info.st_mode & 0o7777:o}"
        elif not path.is_file():  # a FIFO or a device: listed, never read
            listing[name] = f"special {info.st_mode:o}"
        else:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            listing[name] = f"file {info.st_mode & 0o7777:o} {digest}"
    return listing


def write_tree(root: Path, files: dict[str, bytes | str | None]) -> None:
    """Create files under root (str or bytes content; None makes a directory; a str
    "-> target" makes a symbolic link to target)."""
    for name, content in files.items():
        path = root / name.lstrip("/")
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str) and content.startswith("-> "):
            path.symlink_to(content[3:])
            continue
        path.write_bytes(content.encode() if isinstance(content, str) else content)
