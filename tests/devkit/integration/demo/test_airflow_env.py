"""The demo's Airflow connections, built from URLs and DSNs."""

from __future__ import annotations

import json

import pytest

from llm_router_devkit.demo.airflow_env import (
    connection_env,
    postgres_connection,
    router_connection,
)


def test_router_connection_from_a_redis_url() -> None:
    assert router_connection("redis://127.0.0.1:6390/2", "demo-1") == {
        "conn_type": "llm_router", "host": "127.0.0.1", "port": 6390,
        "extra": {"namespace": "demo-1", "db": 2},
    }
    secure = router_connection("rediss://app:p%40ss@cache.example:6380", "n")
    assert secure["login"] == "app" and secure["password"] == "p@ss"
    assert secure["extra"] == {"namespace": "n", "ssl": True}
    with pytest.raises(ValueError, match="redis://"):
        router_connection("http://127.0.0.1:6379", "n")


def test_postgres_connection_from_a_dsn() -> None:
    assert postgres_connection("postgresql://postgres@127.0.0.1:5433/test") == {
        "conn_type": "postgres", "host": "127.0.0.1", "port": 5433, "login": "postgres",
        "schema": "test",
    }
    conn = postgres_connection("host=db user=u password=s dbname=d sslmode=require")
    assert conn["password"] == "s" and conn["extra"] == {"sslmode": "require"}
    assert conn["port"] == 5432


def test_connection_env_sets_the_three_default_ids() -> None:
    env = connection_env(redis_url="redis://127.0.0.1:6379/0",
                         postgres_dsn="postgresql://postgres@127.0.0.1:5432/test",
                         backend_url="http://127.0.0.1:8808/", namespace="demo-x")
    assert set(env) == {"AIRFLOW_CONN_LLM_ROUTER_DEFAULT", "AIRFLOW_CONN_POSTGRES_DEFAULT",
                        "AIRFLOW_CONN_MODELS_BACKEND_DEFAULT"}
    backend = json.loads(env["AIRFLOW_CONN_MODELS_BACKEND_DEFAULT"])
    assert backend == {"conn_type": "models_backend", "host": "http://127.0.0.1:8808",
                       "extra": {"timeout_s": 300.0}}
    assert json.loads(env["AIRFLOW_CONN_LLM_ROUTER_DEFAULT"])["extra"]["namespace"] == "demo-x"
