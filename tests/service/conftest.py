"""LingBot service tests: their helpers and the stand-in on sys.path."""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
for extra in (
    REPO_ROOT / "tests" / "service",
    REPO_ROOT / "lab" / "lingbot_standin",
):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))
