"""A simulator backend behind the default connections, with the router's quotas set."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from tests.integration.backends import serve_backend, set_quotas_from, small_profile


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str,
            redis_url: str) -> Iterator[Any]:
    profile = small_profile(time_scale=600)
    with serve_backend(profile, monkeypatch, namespace, pg_dsn) as sim:
        router = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
        set_quotas_from(router, profile)
        yield sim
        router.close()
