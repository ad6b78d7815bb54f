"""What the project's command lines share: a bad argument ends with one ``error:`` line and
exit status 2, never argparse's usage block followed by the message."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

__all__ = ["CliParser"]


class CliParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line naming the problem, then exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)
