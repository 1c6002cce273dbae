"""Malformed-input tests: the planner's lab inputs (tests/plan) on sys.path."""

import sys
from pathlib import Path

PLAN_TESTS = Path(__file__).resolve().parents[1] / "plan"
if str(PLAN_TESTS) not in sys.path:
    sys.path.insert(0, str(PLAN_TESTS))
