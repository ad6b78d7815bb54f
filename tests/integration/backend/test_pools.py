"""The backend client's connection pool: up to ``max_connections`` calls are on the wire
at once, none queues while a connection is free, and the next waits for one to free."""

from __future__ import annotations

import asyncio

from airflow_llm_router.backend.config import BackendConfig
from airflow_llm_router.backend.session import BackendHttp
from tests.integration.backend.http_server import holding_server


async def test_every_connection_is_used_before_a_call_waits() -> None:
    n = 12
    async with holding_server() as srv:
        config = BackendConfig(base_url=srv.url, timeout_s=30)
        async with BackendHttp(config, n) as http:
            # held and quick calls mixed: the quick ones free their connections again
            first = [asyncio.create_task(http.post("/hold" if i % 2 == 0 else "/quick", {}))
                     for i in range(n)]
            assert await srv.wait_held(n // 2, 10.0) == n // 2
            await asyncio.gather(*(t for i, t in enumerate(first) if i % 2))  # quick ones
            # as many more held calls as there are free connections: every one is sent
            more = [asyncio.create_task(http.post("/hold", {})) for _ in range(n // 2)]
            assert await srv.wait_held(n, 10.0) == n
            # every connection holds a call: one more waits for a free one
            extra = asyncio.create_task(http.post("/hold", {}))
            assert await srv.wait_held(n + 1, 0.3) == n
            srv.release.set()
            replies = await asyncio.gather(*first, *more, extra)
    assert [r.status_code for r, _sent in replies] == [200] * (n + n // 2 + 1)
    assert all(sent is not None for _r, sent in replies)
    assert srv.connections == n  # connections were kept and reused, never more than n
