"""tests/audit: the facts helpers (lab trees rendered in a temp dir) come from tests/facts."""

from __future__ import annotations

import sys
from pathlib import Path

FACTS_TESTS = Path(__file__).resolve().parents[1] / "facts"
if str(FACTS_TESTS) not in sys.path:
    sys.path.insert(0, str(FACTS_TESTS))

from facts_support import lab_env, lab_pynvml  # noqa: E402, F401
