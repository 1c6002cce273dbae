"""Fixtures for tests/monitor: the lab helpers of tests/facts and tests/probe."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
for helpers in (TESTS / "facts", TESTS / "probe"):
    if str(helpers) not in sys.path:
        sys.path.insert(0, str(helpers))

from facts_support import lab_env, lab_pynvml  # noqa: E402, F401
