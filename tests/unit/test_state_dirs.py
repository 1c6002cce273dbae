"""lingbot_fleet.node.state_dirs owns the toolkit's directories under /var/lib/lingbot-fleet: the
code takes them from there, and what the roles' defaults and the documents name is one of
them (or a file in one)."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from lingbot_fleet.node import state_dirs

REPO_ROOT = Path(__file__).resolve().parents[2]
STATE_PATH = re.compile(re.escape(state_dirs.STATE_ROOT) + r"[\w./-]*")
STATE_DIRS = {
    value
    for name, value in vars(state_dirs).items()
    if name.endswith("_DIR") and isinstance(value, str)
}
# Module-level strings that document a module (ansible-doc reads them), not code.
DOCUMENTATION_NAMES = {"DOCUMENTATION", "EXAMPLES", "RETURN"}


def tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--", *patterns],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [REPO_ROOT / name for name in listed if (REPO_ROOT / name).is_file()]


def code_strings(tree: ast.Module) -> list[str]:
    """The string constants of a module that are neither docstrings nor its documentation."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skipped.add(id(body[0].value))
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id in DOCUMENTATION_NAMES
            for target in node.targets
        ):
            skipped.add(id(node.value))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skipped
    ]


def test_every_state_dir_is_under_the_state_root() -> None:
    assert STATE_DIRS
    assert all(path.startswith(state_dirs.STATE_ROOT + "/") for path in STATE_DIRS)


def test_code_takes_its_state_dirs_from_state_dirs() -> None:
    sources = tracked("python/*.py", "roles/*.py", "plugins/*.py", "bench/*.py", "lab/*.py")
    offenders = [
        f"{path.relative_to(REPO_ROOT)}: {text!r}"
        for path in sources
        if path.name != "state_dirs.py"
        for text in code_strings(ast.parse(path.read_text(encoding="utf-8")))
        if state_dirs.STATE_ROOT in text
    ]
    assert offenders == [], "import the directory from lingbot_fleet.node.state_dirs"


def test_defaults_and_documents_name_only_the_owned_state_dirs() -> None:
    texts = tracked("roles/*", "plugins/*", "python/*", "docs/*", "inventory/*", "*.md")
    unknown = [
        f"{path.relative_to(REPO_ROOT)}: {found}"
        for path in texts
        if path.suffix in {".py", ".yml", ".yaml", ".md", ".j2"}
        for found in STATE_PATH.findall(path.read_text(encoding="utf-8"))
        if found.rstrip("./") != state_dirs.STATE_ROOT
        and not any(
            found.rstrip(".") == directory or found.startswith(directory + "/")
            for directory in STATE_DIRS
        )
    ]
    assert unknown == [], "a state directory not in lingbot_fleet.node.state_dirs"
