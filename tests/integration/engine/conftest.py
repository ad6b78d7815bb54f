from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import RouterSettings


@pytest.fixture
def make_router(namespace: str, redis_url: str) -> Iterator[Callable[..., RouterClient]]:
    """Build sync clients on the test's namespace, with settings overrides."""
    made: list[RouterClient] = []

    def make(**overrides: Any) -> RouterClient:
        client = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace, **overrides))
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def router(make_router: Callable[..., RouterClient]) -> RouterClient:
    return make_router()
