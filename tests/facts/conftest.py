"""Fixtures for tests/facts (the helpers live in facts_support.py)."""

from facts_support import lab_env, lab_pynvml, no_pynvml  # noqa: F401
