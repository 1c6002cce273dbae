"""get-pip.py for ansible-test on a machine that reaches a package index but not Ansible's
CI file server.

ansible-test bootstraps pip into every virtual environment a sanity test needs with a
get-pip script it downloads from ci-files.testing.ansible.com, or takes from its cache
(``~/.ansible/test/cache/get_pip_<version>.py``, the documented place for a manual copy).
This script does that job from the pip wheel saved beside it (tests/collection downloads
it with the project's own pip): it runs pip out of the wheel to install what ansible-test
asks for (``pip==<version>``) from that wheel, with no network. get-pip's own options
(``--no-setuptools``, ``--no-wheel``) mean "install only what is named", which is what
``pip install`` does anyway.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GET_PIP_ONLY_OPTIONS = frozenset({"--no-setuptools", "--no-wheel"})


def main() -> int:
    arguments = [argument for argument in sys.argv[1:] if argument not in GET_PIP_ONLY_OPTIONS]
    versions = [
        argument.split("==", 1)[1] for argument in arguments if argument.startswith("pip==")
    ]
    here = Path(__file__).resolve().parent
    wheel = here / f"pip-{versions[0] if versions else '*'}-py3-none-any.whl"
    if not wheel.is_file():
        print(
            f"{wheel} is missing: save it there with pip download --no-deps -d {here} "
            f"pip=={versions[0] if versions else '<version>'}",
            file=sys.stderr,
        )
        return 1
    argv = [sys.executable, f"{wheel}/pip", "install", "--no-index", "--find-links", str(here)]
    return subprocess.call([*argv, *arguments])


if __name__ == "__main__":
    sys.exit(main())
