"""The backend client reads the environment once, not per call: the proxy
(``HTTP_PROXY``/``NO_PROXY``) and a ``.netrc`` entry for the backend's host are honoured, and a
burst of calls makes no hop through the event loop's thread pool."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from airflow_llm_router.backend.config import BackendConfig
from airflow_llm_router.backend.session import BackendHttp
from tests.integration.backend.http_server import holding_server


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No proxy and an empty ``.netrc`` unless a test sets them."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    empty = tmp_path / "empty.netrc"
    empty.write_text("")
    monkeypatch.setenv("NETRC", str(empty))
    return monkeypatch


class _CountingPool(ThreadPoolExecutor):
    """The loop's default executor, counting what is handed to it."""

    submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


async def test_a_burst_of_calls_takes_no_thread_hop(clean_env: pytest.MonkeyPatch) -> None:
    # aiohttp's trust_env reads the proxy and .netrc in the thread pool for each request:
    # two hops a call, which held a burst of hundreds back by half a second
    pool = _CountingPool(max_workers=2)
    asyncio.get_running_loop().set_default_executor(pool)
    async with (holding_server() as srv,
                BackendHttp(BackendConfig(base_url=srv.url, timeout_s=30), 50) as http):
        replies = await asyncio.gather(*(http.post("/single", {"i": i}) for i in range(50)))
    assert [r[0].status_code for r in replies] == [200] * 50
    assert len(srv.requests) == 50
    assert pool.submitted == 0


async def test_the_environments_proxy_carries_the_calls(clean_env: pytest.MonkeyPatch) -> None:
    async with holding_server() as proxy:
        clean_env.setenv("HTTP_PROXY", proxy.url)
        config = BackendConfig(base_url="http://backend.invalid:8080/v1", timeout_s=30)
        async with BackendHttp(config, 4) as http:
            reply, _ = await http.post("/single", {"prompt": "p"})
    assert reply.status_code == 200
    # a proxied request names the whole URL in its request line
    assert [line for line, _ in proxy.requests] == [
        "POST http://backend.invalid:8080/v1/single HTTP/1.1"]


async def test_no_proxy_sends_the_calls_direct(clean_env: pytest.MonkeyPatch) -> None:
    async with holding_server() as proxy, holding_server() as backend:
        clean_env.setenv("HTTP_PROXY", proxy.url)
        clean_env.setenv("NO_PROXY", "127.0.0.1")
        async with BackendHttp(BackendConfig(base_url=backend.url, timeout_s=30), 4) as http:
            reply, _ = await http.post("/single", {"prompt": "p"})
    assert reply.status_code == 200
    assert proxy.requests == []
    assert [line for line, _ in backend.requests] == ["POST /single HTTP/1.1"]


async def test_a_netrc_entry_authenticates_unless_the_connection_does(
        clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login ann password s3cret\n")
    netrc.chmod(0o600)
    clean_env.setenv("NETRC", str(netrc))
    async with holding_server() as backend:
        async with BackendHttp(BackendConfig(base_url=backend.url, timeout_s=30), 4) as http:
            await http.post("/single", {"prompt": "p"})
        own = BackendConfig(base_url=backend.url, timeout_s=30,
                            headers={"Authorization": "Bearer k"})
        async with BackendHttp(own, 4) as http:
            reply, _ = await http.post("/single", {"prompt": "p"})
    assert reply.status_code == 200
    basic = "Basic " + base64.b64encode(b"ann:s3cret").decode()
    assert [h.get("authorization") for _, h in backend.requests] == [basic, "Bearer k"]
