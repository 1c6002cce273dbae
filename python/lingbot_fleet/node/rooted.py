"""Node paths under a root: every node-side module reads and writes ``/etc/...`` as
``on_root(root, "/etc/...")``, so the same code runs on the node (root ``/``) and on a
temporary tree in a test. Stdlib only."""

from __future__ import annotations

import os


def on_root(root: str, path: str) -> str:
    """The node path ``path`` inside ``root`` (an empty root counts as ``/``)."""
    return os.path.join(root or "/", path.lstrip("/"))
