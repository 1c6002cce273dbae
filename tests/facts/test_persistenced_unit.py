"""The nvidia_persistence role's unit reader: ExecStart and its fix."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from types import ModuleType

from facts_support import REPO_ROOT

MODULE_PATH = REPO_ROOT / "roles" / "nvidia_persistence" / "library" / "persistenced_unit.py"
LAB_UNIT = REPO_ROOT / "lab" / "node" / "systemd" / "nvidia-persistenced.service"


def unit_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("persistenced_unit", MODULE_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lab_unit(args: str) -> str:
    return LAB_UNIT.read_text().replace("@PERSISTENCED_ARGS@", args)


def test_exec_start_with_the_flag_and_its_fix() -> None:
    module = unit_module()
    command = module.effective_exec_start(lab_unit("--no-persistence-mode"))
    assert command == (
        "/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose --no-persistence-mode"
    )
    assert module.without_flag(command) == (
        "/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose"
    )


def test_last_exec_start_wins_and_other_sections_are_ignored() -> None:
    module = unit_module()
    text = (
        "[Unit]\nExecStart=/bin/false\n"
        "[Service]\nExecStart=/bin/a\nExecStart=\nExecStart=/bin/b -x\n"
    )
    assert module.effective_exec_start(text) == "/bin/b -x"


def test_module_reports_the_fix_through_ansible(tmp_path: Path) -> None:
    fragment = tmp_path / "nvidia-persistenced.service"
    fragment.write_text(lab_unit("--no-persistence-mode"))
    tree = tmp_path / "tree"
    argv = [
        str(REPO_ROOT / ".venv" / "bin" / "ansible"),
        "localhost",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-m",
        "persistenced_unit",
        "-a",
        json.dumps({"fragment_path": str(fragment)}),
        "--check",
        "--tree",
        str(tree),
    ]
    env_library = str(MODULE_PATH.parent)
    subprocess.run(
        argv,
        capture_output=True,
        check=False,
        cwd=REPO_ROOT,
        env={"ANSIBLE_LIBRARY": env_library, "PATH": "/usr/bin:/bin"},
    )
    result = json.loads((tree / "localhost").read_text())
    assert result["no_persistence_mode"] is True
    assert result["changed"] is False
    assert result["fixed_exec_start"] == (
        "/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose"
    )
