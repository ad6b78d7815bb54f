"""What the project's command lines share: a bad argument ends with one ``error:`` line and
exit status 2, never argparse's usage block followed by the message; log lines go to
standard error, so standard output holds only what the command prints."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import NoReturn

__all__ = ["CliParser", "logs_to_stderr", "read_connections_as_airflow"]


class CliParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line naming the problem, then exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def logs_to_stderr() -> None:
    """Send the log lines that go to standard output (Airflow's logging config sets the root
    logger's console handler on it) to standard error instead. Call it after Airflow is
    imported, before the command logs anything."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)


def read_connections_as_airflow() -> None:
    """Read connections as Airflow's own commands do (``airflow connections ...``, the API
    server): from the secrets backends configured, ``AIRFLOW_CONN_*`` and the metadata
    database. Outside a task the SDK reads only ``AIRFLOW_CONN_*`` and the configured
    backends unless the process says it is a server one; a command does, before it reads a
    connection. A value already set (e.g. by Airflow itself) is kept."""
    os.environ.setdefault("_AIRFLOW_PROCESS_CONTEXT", "server")
