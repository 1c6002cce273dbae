"""Shared test set-up: the repository's python/ and lab/node on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
for path in (REPO_ROOT / "python", REPO_ROOT / "lab" / "node"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
