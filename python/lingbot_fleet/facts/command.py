"""Run a node program for the facts, in the C locale (its output parsed as the C locale
prints it), with a time limit. Stdlib only."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence


def run_command(argv: Sequence[str], timeout_s: float) -> tuple[int | None, str, str]:
    """(exit status, stdout, stderr); (None, "", why) when it could not be run or timed out."""
    environment = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    try:
        result = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=environment,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, "", str(error)
    return result.returncode, result.stdout, result.stderr
