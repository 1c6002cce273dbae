"""``python3 -m lingbot``: run the server (see lingbot.server for the options)."""

import sys

from .server import main

sys.exit(main())
