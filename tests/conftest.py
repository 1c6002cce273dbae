"""Shared test set-up: the repository's python/, lab/node and the helpers several suites
use on sys.path: the planner's lab inputs (tests/plan/plan_support.py), a lab node's tree
(tests/facts/facts_support.py), a module run in this process
(tests/malformed/malformed_support.py), the lab libraries' profile states
(tests/native/native_support.py), a playbook run on localhost
(tests/service/service_support.py) and a pcie_acs node (tests/acs/acs_support.py)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TESTS = REPO_ROOT / "tests"
for path in (
    REPO_ROOT / "python",
    REPO_ROOT / "lab" / "node",
    TESTS / "plan",
    TESTS / "facts",
    TESTS / "malformed",
    TESTS / "native",
    TESTS / "service",
    TESTS / "acs",
):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


class _ModuleUtilsAlias:
    """``ansible.module_utils.lingbot_fleet.X`` is ``lingbot_fleet.X`` in the test process.

    Role modules import the package under Ansible's name (AnsiballZ ships it so); tests that
    load a module file in-process must see the very same module objects, or an exception
    class raised by one name is not caught under the other. Every such test goes through
    this one finder.
    """

    PREFIX = "ansible.module_utils.lingbot_fleet"

    def find_spec(self, name, path=None, target=None):
        if name != self.PREFIX and not name.startswith(self.PREFIX + "."):
            return None
        import importlib.util

        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        import importlib

        return importlib.import_module("lingbot_fleet" + spec.name[len(self.PREFIX) :])

    def exec_module(self, module):
        return None


if not any(isinstance(finder, _ModuleUtilsAlias) for finder in sys.meta_path):
    sys.meta_path.insert(0, _ModuleUtilsAlias())
