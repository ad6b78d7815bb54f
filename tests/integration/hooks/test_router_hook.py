"""The router hook: an Airflow connection in, a configured router client out."""

from __future__ import annotations

import json

import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import Admission
from airflow_llm_router.exceptions import ConnectionConfigError
from airflow_llm_router.hooks.router import RouterHook


@pytest.fixture
def router_conn(namespace: str, monkeypatch: pytest.MonkeyPatch) -> str:
    conn = {"conn_type": "llm_router", "host": "127.0.0.1", "port": 6379,
            "extra": {"namespace": namespace, "guard_ms": 20}}
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_TEST", json.dumps(conn))
    return "llm_router_test"


def test_hook_builds_a_client_from_the_connection(router_conn: str, namespace: str) -> None:
    hook = RouterHook(router_conn)
    assert hook.client.settings.namespace == namespace
    assert hook.client.settings.guard_ms == 20
    ok, message = hook.test_connection()
    assert ok, message
    hook.client.set_quota("a", {"rpm": 5, "tpm": 500, "max_concurrency": 1})
    assert isinstance(hook.client.admit(10), Admission)


async def test_hook_async_client(router_conn: str, namespace: str) -> None:
    client = await RouterHook(router_conn, settings={"guard_ms": 5}).get_async_client()
    try:
        assert client.settings.namespace == namespace and client.settings.guard_ms == 5
        await client.set_quota("a", {"rpm": 5, "tpm": 500, "max_concurrency": 1})
        assert isinstance(await client.admit(10), Admission)
    finally:
        await client.aclose()


def test_unreachable_redis_fails_the_connection_test(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = {"conn_type": "llm_router", "host": "127.0.0.1", "port": 1}
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DOWN", json.dumps(conn))
    ok, message = RouterHook("llm_router_down").test_connection()
    assert not ok and "cannot reach" in message


@pytest.mark.parametrize(
    ("conn", "message"),
    [
        ({"port": -1}, "connection 'llm_router_bad': port: -1 is not a whole number >= 0"),
        ({"extra": {"db": "x"}}, "extra.db: 'x' is not a whole number >= 0"),
        ({"extra": {"socket_timeout": -1}}, "extra.socket_timeout: -1 is not a number >= 0"),
        ({"extra": {"guard_ms": -5}}, "extra.guard_ms: -5 is wrong: Input should be greater"),
        ({"extra": {"namespace": "x", "jitter": 7}}, "extra.jitter: 7 is wrong"),
    ],
)
def test_a_bad_connection_value_is_named_with_its_fix(
    monkeypatch: pytest.MonkeyPatch, conn: dict, message: str
) -> None:
    base = {"conn_type": "llm_router", "host": "127.0.0.1", "port": 6379,
            "password": "s3cret-token"}
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_BAD", json.dumps({**base, **conn}))
    with pytest.raises(ConnectionConfigError, match=message) as raised:
        _ = RouterHook("llm_router_bad").client
    assert "s3cret-token" not in str(raised.value)


def test_hook_arguments_override_the_connection(router_conn: str, namespace: str) -> None:
    client = RouterHook(router_conn, namespace=namespace + "-b",
                        settings={"guard_ms": 7, "lease_ttl_s": 9}).client
    assert client.settings.namespace == namespace + "-b"
    assert (client.settings.guard_ms, client.settings.lease_ttl_s) == (7, 9)


def test_the_readme_engine_example_runs(namespace: str, monkeypatch: pytest.MonkeyPatch,
                                        ) -> None:
    """The README's "Use the engine" block, as written, against a test namespace."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme.split("## Use the engine", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DEFAULT", json.dumps(
        {"conn_type": "llm_router", "host": "127.0.0.1", "port": 6379,
         "extra": {"namespace": namespace}}))
    scope: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), scope)  # the project's own README
    router = scope["router"]
    assert isinstance(router, RouterClient)
    assert router.stats().models["gpt-small"].counters["completed"] == 1


def test_a_redis_providers_connection_serves_the_router_and_the_redis_hook(
        namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One ``redis`` connection (the redis provider's type, which users already have), with
    a database and the router's namespace in its extra, serves both the provider's
    ``RedisHook`` and ``RouterHook``, and they see the same database."""
    from airflow.providers.redis.hooks.redis import RedisHook

    conn = {"conn_type": "redis", "host": "127.0.0.1", "port": 6379,
            "extra": {"db": 3, "namespace": namespace}}
    monkeypatch.setenv("AIRFLOW_CONN_SHARED_REDIS", json.dumps(conn))
    router = RouterHook("shared_redis").client
    router.set_quota("a", {"rpm": 5, "tpm": 500, "max_concurrency": 1})
    assert isinstance(router.admit(10), Admission)
    plain = RedisHook(redis_conn_id="shared_redis").get_conn()
    try:
        assert plain.connection_pool.connection_kwargs["db"] == 3
        assert any(namespace in key.decode() for key in plain.scan_iter(count=1000))
    finally:
        stale = list(plain.scan_iter(match=f"*{namespace}*", count=1000))
        if stale:
            plain.delete(*stale)
        plain.close()
