"""A real third-party OpenAI-compatible server behind the router: LiteLLM's proxy, in its own
process and virtualenv (``scripts/litellm_venv.sh``), its models answering with LiteLLM's
``mock_response`` (no network) under per-model rpm limits that LiteLLM enforces itself.

The router's ``openai`` protocol drains tasks through it under a quota at what the proxy
admits: answers and usage stored as the proxy sent them, 0 429s in the proxy's own count.
The same burst sent straight to the proxy, ungoverned, draws its 429s: the limit binds."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.store import TaskStore
from llm_router_devkit.litellm_proxy import LITELLM_VENV_ENV, LiteLLMProxy
from tests.integration.backends import drain_of

pytestmark = [pytest.mark.timeout(180)]

#: calls LiteLLM admits a calendar minute per model: its usage-based routing takes a
#: deployment only while ``calls + 1 < rpm``, so ``rpm: N`` admits N - 1 (LiteLLM 1.80.0)
ADMITTED_PER_MINUTE = 3
CALLS = 8  # what an ungoverned caller sends at once: more than the proxy admits
ANSWER = "a mocked answer from LiteLLM"
#: LiteLLM's mock answers report this usage whatever the prompt
MOCK_INPUT_TOKENS, MOCK_OUTPUT_TOKENS = 10, 20


def _deployment(name: str) -> dict[str, Any]:
    return {"model_name": name, "litellm_params": {
        "model": f"openai/{name}", "api_key": "unused", "mock_response": ANSWER,
        "rpm": ADMITTED_PER_MINUTE + 1, "tpm": 100_000}}


#: two model groups with the same limits: one drained by the router, one called directly
CONFIG: dict[str, Any] = {
    "model_list": [_deployment("governed"), _deployment("ungoverned")],
    # a refused call is answered 429 at once, as a provider would (not retried in the proxy)
    "router_settings": {"routing_strategy": "usage-based-routing-v2", "num_retries": 0},
}


@pytest.fixture(scope="module")
def proxy() -> Iterator[LiteLLMProxy]:
    if not os.environ.get(LITELLM_VENV_ENV):
        pytest.skip(f"{LITELLM_VENV_ENV} is not set: LiteLLM's proxy needs its own "
                    "virtualenv; scripts/test makes it (`export "
                    f"{LITELLM_VENV_ENV}=$(bash scripts/litellm_venv.sh)`)")
    with LiteLLMProxy(CONFIG) as server:  # a wrong LLMR_LITELLM_VENV fails, not skips
        yield server


async def _drain(pg_schema: str, seconds: float) -> dict[str, Any]:
    """Drain the store for ``seconds``: the calls the quota has no room for by then come
    back unfinished."""
    trigger = drain_of(pg_schema, {"claim_ttl_s": 30, "claim_batch": CALLS,
                                   "max_in_flight": CALLS, "backoff_s": 0.05,
                                   "hedge_late_calls": False},
                       seconds, worker_id="drain-through-litellm")
    payload: dict[str, Any] = (await asyncio.wait_for(anext(trigger.run()), 90)).payload
    return payload


async def test_a_drain_through_litellm_draws_none_of_its_429s(
    monkeypatch: pytest.MonkeyPatch, proxy: LiteLLMProxy, namespace: str, pg_dsn: str,
    pg_schema: str, store: TaskStore, router: RouterClient,
) -> None:
    """Eight tasks, a quota of what the proxy admits a minute: three answered through the
    proxy at once, the other five left for the next window (none sent, none lost)."""
    monkeypatch.setenv("AIRFLOW_CONN_MODELS_BACKEND_DEFAULT", json.dumps({
        "conn_type": "models_backend", "host": proxy.url, "password": proxy.master_key,
        "extra": {"protocol": "openai", "timeout_s": 30}}))
    monkeypatch.setenv("AIRFLOW_CONN_LLM_ROUTER_DEFAULT", json.dumps(
        {"conn_type": "llm_router", "host": "127.0.0.1", "port": 6379,
         "extra": {"namespace": namespace, "lease_ttl_s": 10}}))
    monkeypatch.setenv("AIRFLOW_CONN_POSTGRES_DEFAULT", pg_dsn)
    router.set_quota("governed", {"rpm": ADMITTED_PER_MINUTE, "tpm": 100_000,
                                  "max_concurrency": CALLS, "window_s": 60,
                                  "expected_output_tokens": 50})
    ids = store.enqueue([f"ticket {i}: the printer is on fire" for i in range(CALLS)])
    event = await _drain(pg_schema, seconds=6)
    assert event["status"] == "done", event
    counts = store.counts()
    assert counts["solved"] == ADMITTED_PER_MINUTE, counts
    assert counts.get("failed", 0) == counts.get("dead", 0) == 0, counts
    # the proxy's own count: what it answered, and not one 429
    assert proxy.counts_after("governed", ADMITTED_PER_MINUTE) == {"200": ADMITTED_PER_MINUTE}
    # answers and usage stored as the proxy sent them, and settled in the window
    solved = [row for row in map(store.get, ids) if row and row.status == "solved"]
    assert [r.answer for r in solved] == [ANSWER] * ADMITTED_PER_MINUTE
    assert {(r.input_tokens, r.output_tokens) for r in solved} == {
        (MOCK_INPUT_TOKENS, MOCK_OUTPUT_TOKENS)}
    stats = router.stats().models["governed"]
    assert stats.requests == ADMITTED_PER_MINUTE and stats.in_flight == 0, stats
    assert stats.tokens == ADMITTED_PER_MINUTE * (MOCK_INPUT_TOKENS + MOCK_OUTPUT_TOKENS)


def test_the_same_burst_ungoverned_draws_the_proxys_429s(proxy: LiteLLMProxy) -> None:
    """What the quota spared the proxy: eight calls at once, three answered, five 429s."""

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=proxy.url, timeout=30, headers={
                "Authorization": f"Bearer {proxy.master_key}"}) as http:
            answers = await asyncio.gather(*(http.post("/chat/completions", json={
                "model": "ungoverned", "max_tokens": 50,
                "messages": [{"role": "user", "content": f"ticket {i}"}]})
                for i in range(CALLS)))
        return sorted(a.status_code for a in answers)

    # LiteLLM counts per calendar minute: a burst across its turn would meet two windows
    if datetime.now().second >= 50:
        time.sleep(61 - datetime.now().second)
    statuses = asyncio.run(burst())
    assert statuses == [200] * ADMITTED_PER_MINUTE + [429] * (CALLS - ADMITTED_PER_MINUTE)
    assert proxy.counts_after("ungoverned", CALLS) == {
        "200": ADMITTED_PER_MINUTE, "429": CALLS - ADMITTED_PER_MINUTE}
