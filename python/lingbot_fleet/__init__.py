"""lingbot-fleet: provision, tune and audit multi-GPU servers for LingBot."""

import sys

__version__ = "0.1.0"

# The package runs on the nodes too (as the modules' module_utils), where it needs 3.10.
MINIMUM_PYTHON = (3, 10)
if sys.version_info < MINIMUM_PYTHON:
    raise ImportError(
        f"lingbot-fleet needs Python {'.'.join(map(str, MINIMUM_PYTHON))} or newer, and "
        f"{sys.executable} is {sys.version.split(maxsplit=1)[0]}: on RHEL/Rocky 8 and 9 "
        "install python3.11 and set ansible_python_interpreter: /usr/bin/python3.11 for "
        "the host"
    )
