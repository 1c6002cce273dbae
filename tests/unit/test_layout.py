"""The package's layout says where code runs (docs/layout.md), and these checks keep it so.

- No module lies flat in python/lingbot_fleet but the CLI: each belongs to a step.
- What a role module or the monitor imports on a node (its import closure) is standard
  library only and never reaches controller/, plan's gathering or the audit's runner.
- Every module under node/, boot/, gpu/ and lingbot/ is node-side by its own closure too,
  so code placed there can be imported by a module tomorrow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lingbot_fleet.controller.nodeapp import (
    MONITOR_PACKAGE,
    Closure,
    check_standard_library_only,
    import_closure,
)

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO / "python" / "lingbot_fleet"
NODE_SIDE_PACKAGES = ("node", "boot", "gpu", "lingbot", "facts", "parsers", "monitor")
CONTROLLER_ONLY = ("lingbot_fleet/controller/", "lingbot_fleet/audit/", "lingbot_fleet/rollout/")
ROLE_MODULES = sorted(REPO.glob("roles/*/library/*.py"))
MODULE_UTILS = "ansible.module_utils."


def _node_side_modules() -> list[str]:
    names = []
    for package in NODE_SIDE_PACKAGES:
        for path in sorted((PACKAGE_DIR / package).glob("*.py")):
            stem = "" if path.stem == "__init__" else f".{path.stem}"
            names.append(f"lingbot_fleet.{package}{stem}")
    return names


def _role_module_imports(path: Path) -> list[str]:
    """The package modules a role module imports (through ansible.module_utils)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(MODULE_UTILS):
            module = (node.module or "").removeprefix(MODULE_UTILS)
            if module.startswith("lingbot_fleet"):
                found.append(module)
                found += [
                    f"{module}.{alias.name}"
                    for alias in node.names
                    if (PACKAGE_DIR.parent / f"{module}.{alias.name}".replace(".", "/"))
                    .with_suffix(".py")
                    .exists()
                ]
    return found


def _assert_node_side(closure: Closure, what: str) -> None:
    check_standard_library_only(closure)
    reached = [name for name in closure.files if name.startswith(CONTROLLER_ONLY)]
    assert not reached, f"{what} runs on a node but imports controller code: {reached}"


def test_no_module_lies_flat_in_the_package() -> None:
    flat = sorted(path.name for path in PACKAGE_DIR.glob("*.py"))
    assert flat == ["__init__.py", "cli.py"], (
        "put a new module in the subpackage of its step (docs/layout.md): node/, boot/, gpu/,"
        f" lingbot/, controller/, ...; found {flat}"
    )


@pytest.mark.parametrize("path", ROLE_MODULES, ids=[path.stem for path in ROLE_MODULES])
def test_each_role_module_imports_node_side_code_only(path: Path) -> None:
    imported = _role_module_imports(path)
    assert imported, f"{path.name} imports nothing from the package: the check would pass empty"
    for name in imported:
        _assert_node_side(import_closure(name, PACKAGE_DIR), f"{path.name} (via {name})")


def test_the_monitor_imports_node_side_code_only() -> None:
    _assert_node_side(import_closure(f"{MONITOR_PACKAGE}.__main__", PACKAGE_DIR), "the monitor")


@pytest.mark.parametrize("name", _node_side_modules())
def test_each_module_of_a_node_side_package_is_node_side(name: str) -> None:
    _assert_node_side(import_closure(name, PACKAGE_DIR), name)


def test_the_check_fails_for_controller_code_on_a_node(tmp_path: Path) -> None:
    """A node-side module that imports the policy check is caught."""
    package = tmp_path / "lingbot_fleet"
    (package / "node").mkdir(parents=True)
    (package / "controller").mkdir()
    for init in (package, package / "node", package / "controller"):
        (init / "__init__.py").write_text("")
    (package / "node" / "leaky.py").write_text("from ..controller import policy\n")
    (package / "controller" / "policy.py").write_text("import json\n")
    closure = import_closure("lingbot_fleet.node.leaky", package)
    with pytest.raises(AssertionError, match="imports controller code"):
        _assert_node_side(closure, "lingbot_fleet.node.leaky")
