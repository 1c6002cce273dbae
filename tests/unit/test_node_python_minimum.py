"""The package names the Python it needs when a node's interpreter is too old."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PACKAGE_PARENT = Path(__file__).resolve().parents[2] / "python"


def test_an_interpreter_older_than_3_10_is_refused_with_the_fix() -> None:
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(PACKAGE_PARENT)!r})\n"
        "sys.version_info = (3, 9, 18, 'final', 0)\n"
        "import lingbot_fleet\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert "ImportError: lingbot-fleet needs Python 3.10 or newer" in done.stderr
    assert "set ansible_python_interpreter: /usr/bin/python3.11" in done.stderr
