"""Host tests of the lab's hardware model: import lab/node/lingbot_lab directly."""

import sys
from pathlib import Path

LAB_NODE = Path(__file__).resolve().parents[2] / "lab" / "node"
if str(LAB_NODE) not in sys.path:
    sys.path.insert(0, str(LAB_NODE))
