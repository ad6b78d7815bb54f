"""The provider's command line, ``llm-router`` (or ``python -m airflow_llm_router.cli``).

It stands above every other package: a command line may import anything, nothing imports
it. ``CliParser`` is here for the project's other command lines (the devkit's demo).
"""

from __future__ import annotations

from airflow_llm_router.cli.dispatch import main
from airflow_llm_router.cli_parser import CliParser

__all__ = ["CliParser", "main"]
