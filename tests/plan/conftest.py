"""Planner tests: python/ and lab/node on sys.path; helpers live in plan_support.py."""

import sys
from pathlib import Path

TESTS_PLAN = Path(__file__).resolve().parent
if str(TESTS_PLAN) not in sys.path:
    sys.path.insert(0, str(TESTS_PLAN))
