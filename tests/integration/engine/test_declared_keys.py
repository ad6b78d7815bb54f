"""Every key a script touches is declared to it in KEYS (keys.py), so Redis Cluster can
refuse a script during a slot migration instead of running it where part of the state is
missing (test_resharding.py). Checked here on a private Redis with MONITOR, which logs
each EVALSHA with its KEYS and then every command the script ran: each key those commands
touch must be one the EVALSHA declared. And: a call that may go to any model declares
every model the client knows of; one added since is caught by the script before it writes
anything, and the client re-reads the models and retries."""

from __future__ import annotations

import asyncio
import re
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis

from airflow_llm_router.engine import (
    Admission,
    AdmitRequest,
    AsyncRouterClient,
    Completion,
    RouterClient,
    RouterSettings,
    Wait,
)
from airflow_llm_router.engine.core import Script
from airflow_llm_router.engine.scripts import script_source
from llm_router_devkit.redis_tools import PrivateRedis, private_redis

QUOTA = {"rpm": 1000, "tpm": 10**7, "max_concurrency": 2, "window_s": 60}
PRICED = {**QUOTA, "input_micro_usd_per_mtok": 1_000_000,
          "output_micro_usd_per_mtok": 2_000_000, "budget_micro_usd": 10**9}
#: Redis commands the scripts run that name no key (the channel is not a key)
_NO_KEY = {"TIME", "PUBLISH", "SPUBLISH"}
_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')


@pytest.fixture
def server() -> Iterator[PrivateRedis]:
    with private_redis() as s:
        yield s


def _settings() -> RouterSettings:
    return RouterSettings(namespace=f"keys-{uuid.uuid4().hex[:8]}", guard_ms=20)


class Monitor:
    """MONITOR's log of one server, read in a thread until ``ECHO <marker>``."""

    def __init__(self, url: str) -> None:
        self.marker = f"end-{uuid.uuid4().hex}"
        self.lines: list[tuple[bool, list[str]]] = []  # (run by a script, args)
        self._client = redis.Redis.from_url(url)
        self._monitor = self._client.monitor().__enter__()
        self._thread = threading.Thread(target=self._read)
        self._thread.start()

    def _read(self) -> None:
        while True:
            raw = self._monitor.connection.read_response()
            line = raw if isinstance(raw, bytes) else str(raw).encode()
            args = [a.decode("unicode_escape") for a in _ARG.findall(line)]
            if args[:2] == ["ECHO", self.marker]:
                return
            self.lines.append((b" lua] " in line, args))

    def stop(self, url: str) -> None:
        with redis.Redis.from_url(url) as r:
            r.echo(self.marker)
        self._thread.join(30)
        self._monitor.__exit__(None, None, None)
        self._client.close()

    def undeclared(self, prefix: str) -> tuple[list[str], int]:
        """Keys of the namespace that a script's command touched without its EVALSHA
        declaring them, and how many script commands were seen."""
        declared: set[str] = set()
        found, seen = [], 0
        for in_script, args in self.lines:
            name = args[0].upper() if args else ""
            if not in_script:
                if name == "EVALSHA":
                    declared = set(args[3:3 + int(args[2])])
                continue
            seen += 1
            if name in _NO_KEY:
                continue
            keys = args[1:] if name == "DEL" else args[1:2]
            found += [f"{name} {k}" for k in keys if k.startswith(prefix) and k not in declared]
        return found, seen


def _workload(router: RouterClient, other: RouterClient) -> None:
    """Every operation, on paths that touch each kind of key."""
    router.set_quota("a", QUOTA)
    router.set_quota("b", PRICED)
    router.set_budget({"budget_micro_usd": 10**9, "budget_period_s": 3600})
    leases = [router.admit(input_tokens=10, kind="summary") for _ in range(3)]
    leases += [router.admit(50, models=["b", "a"], ordered=True, kind="essay")]
    held = [x for x in leases if isinstance(x, Admission)]
    assert len(held) == 4
    ids = [x.lease_id for x in held]
    assert all(t is not None for t in router.heartbeat_many(ids))
    router.mark_sent(ids)
    # a Wait (both models full) puts a waiter in, and a cancel takes it out
    waiting = router.admit_many([AdmitRequest(1, request_id="w-1")])[0]
    assert isinstance(waiting, Wait)
    assert router.cancel(["w-1"]) == 1
    router.complete_many([
        Completion(ids[0], 10, 20),
        Completion(ids[1], 10, 20, outcome="rate_limited", retry_after_s=0.01),
        Completion(ids[2], 10, 20, outcome="error"),
        Completion(ids[3], 10, 20),
    ])
    other.set_quota("c", QUOTA)  # a model this client has not read yet
    assert isinstance(router.admit(1), Admission)
    assert set(router.stats().models) == {"a", "b", "c"}
    router.stats(["a"])
    router.history()
    router.sync_quotas({"a": router.get_quota("a")}, after_loss=True)  # type: ignore[dict-item]
    assert router.delete_quota("c")


def test_every_key_a_script_touches_is_declared(server: PrivateRedis) -> None:
    settings = _settings()
    router = RouterClient.from_url(server.url, settings)
    other = RouterClient.from_url(server.url, settings)
    monitor = Monitor(server.url)
    try:
        _workload(router, other)
    finally:
        monitor.stop(server.url)
        router.close()
        other.close()
    undeclared, seen = monitor.undeclared(router.core.keys.prefix)
    assert seen > 100  # the log did hold the scripts' commands
    assert undeclared == []


def test_a_model_key_not_declared_is_refused_by_the_script(server: PrivateRedis) -> None:
    """The prelude's guard: a script asked to touch a model it was not given the keys of
    fails before touching it."""
    router = RouterClient.from_url(server.url, _settings())
    try:
        router.set_quota("a", QUOTA)
        lease = router.admit(1)
        assert isinstance(lease, Admission)
        action = Script("heartbeat", items=(lease.lease_id,))  # no model declared
        keys = router.core.script_keys(action)
        with pytest.raises(redis.ResponseError, match="keys of model a were not declared"):
            router.redis.eval(script_source("heartbeat"), len(keys), *keys,
                              router.core.settings_arg, *action.argv())
        assert router.heartbeat(lease.lease_id) > 0  # declared by the client: extended
    finally:
        router.close()


def test_any_model_admission_reaches_a_model_added_by_another_client(
        server: PrivateRedis) -> None:
    settings = _settings()
    router = RouterClient.from_url(server.url, settings)
    other = RouterClient.from_url(server.url, settings)
    try:
        router.set_quota("a", {**QUOTA, "max_concurrency": 1})
        assert isinstance(router.admit(1), Admission)  # "a" is now full
        assert router.core.models == ("a",)
        other.set_quota("b", QUOTA)
        got = router.admit(1)
        assert isinstance(got, Admission) and got.model == "b"
        # declared from the head of the any-model order the engine named (it knew "b")
        assert "b" in (router.core.head or ())
    finally:
        router.close()
        other.close()


async def test_merged_async_admissions_reach_a_model_added_by_another_client(
        server: PrivateRedis) -> None:
    settings = _settings()
    router = AsyncRouterClient.from_url(server.url, settings)
    other = RouterClient.from_url(server.url, settings)
    try:
        await router.set_quota("a", {**QUOTA, "max_concurrency": 1})
        assert isinstance(await router.admit(1), Admission)
        other.set_quota("b", {**QUOTA, "max_concurrency": 3})
        got = await asyncio.gather(*(router.admit(1, request_id=f"r{k}") for k in range(3)))
        assert [type(g) for g in got].count(Admission) == 3
        assert {g.model for g in got if isinstance(g, Admission)} == {"b"}
        assert "b" in (router.core.head or ())  # named to the merged call's callers
    finally:
        await router.aclose()
        other.close()
