"""``python -m airflow_llm_router.cli``: the same as the ``llm-router`` command."""

from __future__ import annotations

import sys

from airflow_llm_router.cli.dispatch import main

if __name__ == "__main__":
    sys.exit(main())
