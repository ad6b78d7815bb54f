"""The HTTP routes on real Redis: the app in process (httpx over ASGI, where a server adds
nothing), and helpers shared by the standalone and plugin tests."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.async_client import AsyncRouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.web import Lazy, create_app, token_access
from tests.conftest import REDIS_URL
from tests.integration.plugins.conftest import quota_ui, tokens, ui  # noqa: F401 (fixtures)

TOKEN = secrets.token_urlsafe(24)
AUTH = {"Authorization": f"Bearer {TOKEN}"}

MakeApi = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def make_api(namespace: str) -> AsyncIterator[MakeApi]:
    """Build the API app on the test's namespace (with router settings overrides, for
    ``/tasks`` a ``task_store`` source, and the routes' ``prefix``) and an httpx client that
    sends the token; everything is closed after the test."""
    opened: list[tuple[httpx.AsyncClient, list[Lazy[Any]]]] = []

    async def make(*, task_store: Lazy[Any] | None = None, prefix: str = "", **settings: Any
                   ) -> httpx.AsyncClient:
        async def build() -> AsyncRouterClient:
            return AsyncRouterClient.from_url(
                REDIS_URL, RouterSettings(namespace=namespace, **settings))

        async def close(client: AsyncRouterClient) -> None:
            await client.aclose()

        source = Lazy(build, "the test's Redis", close)
        app = create_app(access=token_access(TOKEN), router=source, task_store=task_store,
                         prefix=prefix)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                   base_url="http://api", headers=AUTH)
        opened.append((client, [source] if task_store is None else [source, task_store]))
        return client

    yield make
    for client, sources in opened:
        await client.aclose()
        for each in sources:
            await each.aclose()


@pytest.fixture
async def api(make_api: MakeApi) -> httpx.AsyncClient:
    return await make_api()


@pytest.fixture
def engine(namespace: str) -> Iterator[RouterClient]:
    """A sync client of the same namespace, to set quotas and read the engine's own stats."""
    client = RouterClient.from_url(REDIS_URL, RouterSettings(namespace=namespace))
    yield client
    client.close()
