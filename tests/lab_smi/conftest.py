"""Fixtures for tests/lab_smi (the helpers live in lab_smi_support.py)."""

from lab_smi_support import lab_root, lost_state, state  # noqa: F401
