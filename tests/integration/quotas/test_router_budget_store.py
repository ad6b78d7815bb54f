"""The router-wide spend budget is durable: stored in PostgreSQL with an audit row per
change, pushed to Redis in the same transaction, and restored with the quotas into a Redis
that lost its data."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from psycopg import sql

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.quota import RouterBudget
from airflow_llm_router.engine.types import Admission, RouterSettings, Wait
from airflow_llm_router.exceptions import QuotaValidationError
from airflow_llm_router.quotas import QuotaStore
from airflow_llm_router.quotas.router_budget import ROUTER_BUDGET_AUDIT_NAME
from tests.integration.redis_server import private_redis

PRICED = {"rpm": 100, "tpm": 10**6, "max_concurrency": 10,
          "input_micro_usd_per_mtok": 2_000_000, "output_micro_usd_per_mtok": 8_000_000}
BUDGET = {"budget_micro_usd": 1_000, "budget_period_s": 366 * 86400}


def test_the_budget_is_stored_audited_and_pushed(quota_store: QuotaStore,
                                                 router: RouterClient) -> None:
    assert quota_store.budget_record() is None
    change = quota_store.set_budget(BUDGET, actor="alice", source="api")
    assert change.action == "create" and change.old is None
    assert change.new == RouterBudget(**BUDGET) and change.audit_id is not None
    assert router.budget() == RouterBudget(**BUDGET)
    record = quota_store.budget_record()
    assert record is not None and record.budget == RouterBudget(**BUDGET)
    assert record.updated_by == "alice"
    # the same value again changes nothing and writes no audit row
    assert quota_store.set_budget(RouterBudget(**BUDGET), actor="bob").audit_id is None
    raised = quota_store.set_budget({**BUDGET, "budget_micro_usd": 5_000}, actor="bob")
    assert raised.action == "replace" and router.budget() == RouterBudget(
        budget_micro_usd=5_000, budget_period_s=BUDGET["budget_period_s"])
    removed = quota_store.set_budget(None, actor="carol")
    assert removed.action == "delete" and removed.new is None
    assert router.budget() is None and quota_store.budget_record() is None
    entries = [e for e in quota_store.audit() if e.model == ROUTER_BUDGET_AUDIT_NAME]
    assert [(e.actor, e.action) for e in entries] == [
        ("carol", "delete"), ("bob", "replace"), ("alice", "create")]
    assert entries[1].old == BUDGET and entries[1].new == {**BUDGET, "budget_micro_usd": 5_000}


def test_a_bad_budget_names_the_field_and_changes_nothing(quota_store: QuotaStore,
                                                          router: RouterClient) -> None:
    quota_store.set_budget(BUDGET, actor="a")
    with pytest.raises(QuotaValidationError, match="budget_micro_usd"):
        quota_store.set_budget({"budget_micro_usd": -1}, actor="a")
    with pytest.raises(QuotaValidationError, match="budget_period_s"):
        quota_store.set_budget({"budget_micro_usd": 5, "budget_period_s": 0}, actor="a")
    assert router.budget() == RouterBudget(**BUDGET)
    record = quota_store.budget_record()
    assert record is not None and record.budget == RouterBudget(**BUDGET)


def test_a_redis_that_lost_its_data_gets_the_budget_back(
        quota_store: QuotaStore, namespace: str, redis_url: str,
        lose_redis: Callable[[], int]) -> None:
    quota_store.put("m", PRICED, actor="a")
    quota_store.set_budget(BUDGET, actor="a")
    assert lose_redis() > 0
    client = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace,
                                                             recovery_share=1.0),
                                   quota_source=quota_store.durable)
    try:
        assert client.budget() is None  # lost with the rest
        # the first admission finds no quota, restores quotas and budget, then decides:
        # 50 in + 50 out = 100 + 400 micro-dollars, so two calls fit the 1,000 total budget
        got = [client.admit(100, estimated_output_tokens=50, models=["m"]) for _ in range(3)]
        assert [type(d) for d in got] == [Admission, Admission, Wait]
        assert isinstance(got[2], Wait) and got[2].reason == "budget"
        assert client.budget() == RouterBudget(**BUDGET)
        total = client.stats().total_spend
        assert total is not None and total.budget_micro_usd == 1_000
    finally:
        client.close()


def test_a_change_after_a_loss_restores_the_budget_too(
        quota_store: QuotaStore, router: RouterClient,
        lose_redis: Callable[[], int]) -> None:
    quota_store.put("m", PRICED, actor="a")
    quota_store.set_budget(BUDGET, actor="a")
    assert lose_redis() > 0
    quota_store.put("other", PRICED, actor="a")  # resyncs what Redis lacks first
    assert router.budget() == RouterBudget(**BUDGET)
    assert set(router.get_quotas()) == {"m", "other"}


def test_a_store_not_migrated_for_the_budget_still_restores_its_quotas(
        quota_store: QuotaStore, pg_dsn: str, pg_schema: str) -> None:
    quota_store.put("m", PRICED, actor="a")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # as before quota migration 2
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(pg_schema, "quotas_budget")))
    stored = quota_store.durable()
    assert set(stored.quotas) == {"m"} and stored.budget is None


def test_a_flushall_then_a_read_brings_the_budget_back(pg_dsn: str, pg_schema: str,
                                                       namespace: str) -> None:
    """The whole Redis flushed (a private redis-server: the shared one is never flushed);
    a reader of the stats restores quotas and budget before it reads."""
    with private_redis() as server:
        settings = RouterSettings(namespace=namespace, recovery_share=1.0)
        writer = RouterClient.from_url(server.url, settings)
        reader = None
        try:
            store = QuotaStore(pg_dsn, writer, schema=pg_schema)
            store.migrate()
            store.put("m", PRICED, actor="a")
            store.set_budget(BUDGET, actor="a")
            assert writer.redis.flushall()
            assert writer.budget() is None and writer.get_quotas() == {}
            reader = RouterClient.from_url(server.url, settings, quota_source=store.durable)
            total = reader.stats().total_spend
            assert total is not None and total.budget_micro_usd == BUDGET["budget_micro_usd"]
            assert writer.budget() == RouterBudget(**BUDGET)
            assert set(writer.get_quotas()) == {"m"}
        finally:
            writer.close()
            if reader is not None:
                reader.close()
