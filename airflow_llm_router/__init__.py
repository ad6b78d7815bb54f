"""airflow-llm-router: per-model LLM traffic control and backlog draining for Airflow 3.

What every caller shares with the provider: the kind a prompt has when none is given, and
the input-token estimate the router admits by (docs/architecture.md lists each package's
public names).
"""

from __future__ import annotations

from airflow_llm_router.names import DEFAULT_KIND
from airflow_llm_router.tokens import count_input_tokens

__version__ = "0.1.0"

__all__ = ["DEFAULT_KIND", "__version__", "count_input_tokens"]
