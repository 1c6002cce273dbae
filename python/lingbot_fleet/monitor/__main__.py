"""``python -m lingbot_fleet.monitor``: one run of the path monitor."""

import sys

from .cli import main

sys.exit(main())
