"""Registration with Airflow: the provider entry point and the router hook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_llm_router.engine.types import Admission


def test_airflow_providers_list_shows_the_provider(tmp_path: Path) -> None:
    airflow = Path(sys.executable).parent / "airflow"
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    out = subprocess.run([str(airflow), "providers", "list", "-o", "json"], env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    providers = {p["package_name"]: p for p in json.loads(out[out.index("[{"):])}
    assert "airflow-llm-router" in providers


def test_provider_info_names_importable_hooks() -> None:
    import importlib

    from airflow_llm_router.get_provider_info import get_provider_info

    info = get_provider_info()
    for conn_type in info["connection-types"]:
        module, _, cls = conn_type["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), cls)
        assert hook.conn_type == conn_type["connection-type"]


@pytest.fixture
def router_conn(namespace: str, monkeypatch: pytest.MonkeyPatch) -> str:
    conn = {"conn_type": "llm_router", "host": "127.0.0.1", "port": 6379,
            "extra": {"namespace": namespace, "guard_ms": 20}}
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_TEST", json.dumps(conn))
    return "llm_router_test"


def test_hook_builds_a_client_from_the_connection(router_conn: str, namespace: str) -> None:
    from airflow_llm_router.hooks.router import RouterHook

    hook = RouterHook(router_conn)
    assert hook.client.settings.namespace == namespace
    assert hook.client.settings.guard_ms == 20
    ok, message = hook.test_connection()
    assert ok, message
    hook.client.set_quota("a", {"rpm": 5, "tpm": 500, "max_concurrency": 1})
    assert isinstance(hook.client.admit(10), Admission)


async def test_hook_async_client(router_conn: str, namespace: str) -> None:
    from airflow_llm_router.hooks.router import RouterHook

    client = await RouterHook(router_conn, settings={"guard_ms": 5}).get_async_client()
    try:
        assert client.settings.namespace == namespace and client.settings.guard_ms == 5
        await client.set_quota("a", {"rpm": 5, "tpm": 500, "max_concurrency": 1})
        assert isinstance(await client.admit(10), Admission)
    finally:
        await client.aclose()


def test_unreachable_redis_fails_the_connection_test(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_llm_router.hooks.router import RouterHook

    conn = {"conn_type": "llm_router", "host": "127.0.0.1", "port": 1}
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DOWN", json.dumps(conn))
    ok, message = RouterHook("llm_router_down").test_connection()
    assert not ok and "cannot reach" in message
