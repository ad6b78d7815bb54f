"""The quota store: PostgreSQL first, Redis second, an audit row per change, nothing
half-applied."""

from __future__ import annotations

import psycopg
import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.quota import ModelQuota
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.exceptions import QuotaNotFoundError, QuotaStoreError, QuotaValidationError
from airflow_llm_router.quotas import QuotaStore

SMALL = {"rpm": 60, "tpm": 90_000, "max_concurrency": 8}


def test_put_patch_delete_reach_redis_and_the_audit_log(quota_store: QuotaStore,
                                                       router: RouterClient) -> None:
    created = quota_store.put("gpt-small", SMALL, actor="alice")
    assert created.action == "create" and created.old is None
    assert router.get_quota("gpt-small") == ModelQuota(**SMALL)

    patched = quota_store.patch("gpt-small", {"rpm": 30, "enabled": False}, actor="bob")
    assert patched.action == "patch"
    assert router.get_quota("gpt-small") == ModelQuota(**{**SMALL, "rpm": 30, "enabled": False})
    record = quota_store.get("gpt-small")
    assert record is not None and record.updated_by == "bob" and record.quota.rpm == 30

    quota_store.delete("gpt-small", actor="carol")
    assert router.get_quota("gpt-small") is None
    assert quota_store.get("gpt-small") is None

    audit = quota_store.audit()
    assert [(a.actor, a.action) for a in audit] == [
        ("carol", "delete"), ("bob", "patch"), ("alice", "create")]
    assert audit[0].old is not None and audit[0].old["rpm"] == 30 and audit[0].new is None
    assert audit[1].old is not None and audit[1].old["rpm"] == 60
    assert audit[1].new is not None and audit[1].new["rpm"] == 30
    assert audit[2].at <= audit[1].at <= audit[0].at


def test_an_unchanged_value_writes_no_audit_row_but_repairs_redis(
        quota_store: QuotaStore, router: RouterClient) -> None:
    quota_store.put("m", SMALL, actor="a")
    router.set_quota("m", {**SMALL, "rpm": 1})  # Redis drifted from the store
    again = quota_store.put("m", dict(SMALL), actor="a")
    assert again.audit_id is None
    assert len(quota_store.audit("m")) == 1
    assert router.get_quota("m") == ModelQuota(**SMALL)


@pytest.mark.parametrize(("fields", "named"), [
    ({"rpm": -1}, "rpm"),
    ({"tpm": "many"}, "tpm"),
    ({"window_s": 0}, "window_s"),
    ({"burst": 3}, "burst"),
    ({"rpm": None}, "rpm"),
])
def test_an_invalid_patch_changes_nothing(quota_store: QuotaStore, router: RouterClient,
                                          fields: dict[str, object], named: str) -> None:
    quota_store.put("m", SMALL, actor="a")
    with pytest.raises(QuotaValidationError, match=named):
        quota_store.patch("m", fields, actor="b")
    assert quota_store.quotas() == {"m": ModelQuota(**SMALL)}
    assert router.get_quota("m") == ModelQuota(**SMALL)
    assert len(quota_store.audit()) == 1


def test_bad_model_names_and_missing_models(quota_store: QuotaStore) -> None:
    with pytest.raises(QuotaValidationError, match="model"):
        quota_store.put("bad{name}", SMALL, actor="a")
    with pytest.raises(QuotaNotFoundError, match="no quota"):
        quota_store.patch("ghost", {"rpm": 1}, actor="a")
    with pytest.raises(QuotaNotFoundError):
        quota_store.delete("ghost", actor="a")
    assert quota_store.audit() == []


def test_redis_down_changes_nothing_in_postgres(pg_dsn: str, pg_schema: str,
                                               quota_store: QuotaStore) -> None:
    quota_store.put("m", SMALL, actor="a")
    # A real client to a port where no Redis listens: the push fails.
    dead = RouterClient.from_url("redis://127.0.0.1:1/0", RouterSettings())
    unreachable = QuotaStore(pg_dsn, dead, schema=pg_schema)
    with pytest.raises(QuotaStoreError, match="nothing was changed"):
        unreachable.patch("m", {"rpm": 5}, actor="b")
    with pytest.raises(QuotaStoreError):
        unreachable.load({"m": {**SMALL, "rpm": 7}, "n": SMALL}, actor="b")
    assert quota_store.quotas() == {"m": ModelQuota(**SMALL)}
    assert len(quota_store.audit()) == 1


def test_load_applies_all_or_nothing_and_prunes(quota_store: QuotaStore,
                                                router: RouterClient) -> None:
    quota_store.put("old", SMALL, actor="a")
    changes = quota_store.load({"a": SMALL, "b": {**SMALL, "weight": 2.0}}, actor="deploy",
                               prune=True)
    assert sorted((c.model, c.action) for c in changes) == [
        ("a", "create"), ("b", "create"), ("old", "delete")]
    assert sorted(router.get_quotas()) == ["a", "b"]
    with pytest.raises(QuotaValidationError, match="rpm"):
        quota_store.load({"c": SMALL, "d": {**SMALL, "rpm": 0}}, actor="deploy")
    assert sorted(quota_store.quotas()) == ["a", "b"]


def test_unmigrated_table_says_how_to_fix(pg_dsn: str, pg_schema: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{pg_schema}"')
    with pytest.raises(QuotaStoreError, match="migrate"):
        QuotaStore(pg_dsn, schema=pg_schema).records()
