"""Shared helpers of the lab model tests (paths, profile loading, running the node tools)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
LAB_NODE = REPO_ROOT / "lab" / "node"
PROFILES_DIR = REPO_ROOT / "lab" / "profiles"
if str(LAB_NODE) not in sys.path:
    sys.path.insert(0, str(LAB_NODE))

from lingbot_lab.profile import validate_profile  # noqa: E402


def read_profile_yaml(name: str) -> dict[str, Any]:
    with open(PROFILES_DIR / f"{name}.yml", encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def load_profile(name: str) -> dict[str, Any]:
    return validate_profile(read_profile_yaml(name))


def run_tool(name: str, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run lab/node/bin/<name> against a node root under LINGBOT_LAB_ROOT."""
    env = {**os.environ, "LINGBOT_LAB_ROOT": str(root), "LINGBOT_LAB_LIB": str(LAB_NODE)}
    return subprocess.run(
        [sys.executable, str(LAB_NODE / "bin" / name), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
