"""The product-path benchmark keeps its quotas as a deployment does: in a quota store
(PostgreSQL) pushed to Redis with the sync marker, and its router connection names that
store, so the hook's clients find Redis whole and never reach for a missing quota table."""

from __future__ import annotations

import psycopg
from psycopg import sql

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.quota import ModelQuota
from airflow_llm_router.quotas.config import QuotaConfig
from bench.e2e.services import load_quotas, run_router_connection
from llm_router_devkit.demo.router_quotas import router_quotas
from llm_router_devkit.simulator import SimulatorProfile


def test_the_quotas_are_stored_audited_and_pushed_with_the_marker(
        router: RouterClient, pg_dsn: str, pg_schema: str) -> None:
    profile = SimulatorProfile.default()
    assert not router.quotas_synced()  # a new namespace: no marker yet
    store = load_quotas(pg_dsn, router, pg_schema, profile)
    wanted = {m: ModelQuota.model_validate(q) for m, q in router_quotas(profile).items()}
    assert router.quotas_synced()
    assert router.get_quotas() == wanted
    assert store.quotas() == wanted
    with psycopg.connect(pg_dsn) as conn:
        audited = conn.execute(sql.SQL("SELECT count(*) FROM {}.quotas_audit").format(
            sql.Identifier(pg_schema))).fetchone()
    assert audited == (len(wanted),)


def test_the_router_connection_names_the_runs_quota_store() -> None:
    conn = run_router_connection("redis://127.0.0.1:6379/2", "bench-x", "llmr_bench_x")
    assert conn["extra"] == {"namespace": "bench-x", "db": 2, "quota_schema": "llmr_bench_x"}
    assert QuotaConfig().with_router_extra(conn["extra"]).schema == "llmr_bench_x"
