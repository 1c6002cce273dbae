"""`systemd-analyze security --offline` on a unit file under a root: its exposure level. Every
unit the toolkit writes stays at or below MAX_EXPOSURE (the bar the toolkit holds itself to)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ANALYZE = shutil.which("systemd-analyze")
MAX_EXPOSURE = 2.0
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


def exposure(root: Path, unit: str) -> float:
    done = subprocess.run(
        [str(ANALYZE), "security", "--offline=yes", f"--root={root}", "--no-pager", unit],
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", done.stdout)
    assert found, done.stdout + done.stderr
    return float(found.group(1))
