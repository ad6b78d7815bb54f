"""The end-to-end demo: ``python -m llm_router_devkit.demo`` (or ``scripts/demo``).

Starts an embedded Redis and PostgreSQL (from pip packages), the Models Backend simulator
and Airflow (SQLite metadata DB under ``.demo/airflow``), seeds a backlog of prompts, drains
it with the ``llm_router_drain`` example DAG through ``dag.test()``, and reports what the
backend saw per model against its limits and the capacity bound. See ``docs/demo.md``.

The modules are usable on their own (the benchmark reuses them): ``services`` (embedded
servers), ``seed`` (the backlog), ``quotas`` (router quotas from a simulator profile),
``bound`` (the capacity bound), ``summary`` (the report), ``progress`` (progress lines),
``airflow_env`` (connections, metadata DB, one DAG run), ``stack`` (the real scheduler,
triggerer, DAG processor and API server as one process group).
"""

from __future__ import annotations

from llm_router_devkit.demo.run import DemoOptions, run

__all__ = ["DemoOptions", "run"]
