"""The common.ai example DAG, loaded into the tests' Airflow DAGs folder so dag.test() can
run it (a DAG file must mention both words for Airflow's safe-mode parsing to read it)."""

from example_dags.llm_router_common_ai import dag

__all__ = ["dag"]
