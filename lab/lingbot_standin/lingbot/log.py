"""One-line log records on stderr, in a form the systemd journal understands.

Under systemd (``JOURNAL_STREAM`` set) each line starts with a ``<N>`` syslog priority
prefix, which journald turns into the record's priority; on a terminal each line starts
with a UTC timestamp instead. Newlines inside a message are written as ``\\n`` so one
record is always one line.
"""

from __future__ import annotations

import logging
import os
import sys
import time

LOGGER_NAME = "lingbot"
_SYSLOG_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


class OneLineFormatter(logging.Formatter):
    def __init__(self, for_journal: bool) -> None:
        super().__init__()
        self.for_journal = for_journal

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage().replace("\n", "\\n")
        if self.for_journal:
            priority = _SYSLOG_PRIORITY.get(record.levelno, 6)
            return f"<{priority}>{record.levelname} {message}"
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return (
            f"{stamp}.{int(record.msecs):03d}Z lingbot[{os.getpid()}] {record.levelname} {message}"
        )


def configure_logging(verbose: bool) -> logging.Logger:
    logger = logging.getLogger(LOGGER_NAME)
    logger.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter(for_journal="JOURNAL_STREAM" in os.environ))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    logger.propagate = False
    return logger
