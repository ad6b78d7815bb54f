"""A client's operation methods are built once per client and kept: a solver calls a few
per answer, and building one (``functools.wraps``) cost ~10 µs each time."""

from __future__ import annotations

import asyncio

from airflow_llm_router.engine import AsyncRouterClient, RouterClient, RouterSettings
from airflow_llm_router.engine.api import RouterAPI, operation


def test_a_method_is_built_once_per_client_and_bound_to_it() -> None:
    one = RouterClient.from_url("redis://127.0.0.1:1/0", RouterSettings(namespace="a"))
    two = RouterClient.from_url("redis://127.0.0.1:1/0", RouterSettings(namespace="b"))
    try:
        first = one.get_quotas
        assert one.get_quotas is first  # kept, not built again
        assert vars(one)["get_quotas"] is first
        assert two.get_quotas is not first  # each client its own, driving itself
        assert first.__name__ == "get_quotas" and first.__doc__ == RouterAPI.get_quotas.__doc__
        assert isinstance(vars(RouterAPI)["get_quotas"], operation)  # the class keeps it
    finally:
        one.close()
        two.close()


def test_the_kept_method_drives_its_own_client() -> None:
    seen: list[object] = []

    class Recording(AsyncRouterClient):
        async def _drive(self, step: object) -> object:
            seen.append(self)
            return None

    a = Recording.from_url("redis://127.0.0.1:1/0", RouterSettings(namespace="a"))
    b = Recording.from_url("redis://127.0.0.1:1/0", RouterSettings(namespace="b"))
    for client in (a, b, a):
        asyncio.run(client.get_quotas())
    assert seen == [a, b, a]
