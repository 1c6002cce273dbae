"""Progress as hosts finish: a bar with counts on a terminal, one plain line per host otherwise."""

from __future__ import annotations

import sys
from typing import TextIO

BAR_WIDTH = 30


class Progress:
    """``total`` may come later (``start``): the audit reads the inventory while it runs."""

    def __init__(
        self, total: int = 0, stream: TextIO | None = None, tty: bool | None = None
    ) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.counts = {"ok": 0, "findings": 0, "unreachable": 0, "failed": 0}

    @property
    def done(self) -> int:
        return sum(self.counts.values())

    def line(self) -> str:
        filled = BAR_WIDTH * self.done // self.total if self.total else BAR_WIDTH
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        counts = " ".join(f"{key} {value}" for key, value in self.counts.items())
        return f"[{bar}] {self.done}/{self.total}  {counts}"

    def start(self, hosts: list[str]) -> None:
        self.total = len(hosts)

    def host_done(self, host: str, status: str) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1
        if self.tty:
            self.stream.write("\r" + self.line())
        else:
            self.stream.write(f"audit: {host} {status} ({self.done}/{self.total})\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
