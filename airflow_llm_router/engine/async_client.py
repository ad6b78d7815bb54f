"""The asyncio router client, for triggers: many coroutines share one client."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis
import redis.asyncio as aioredis

from airflow_llm_router.engine.api import AsyncDriver, RouterAPI, single_decision
from airflow_llm_router.engine.connect import async_redis, target_from_url
from airflow_llm_router.engine.core import RouterCore
from airflow_llm_router.engine.failover import watch_master
from airflow_llm_router.engine.merger import ScriptMerger
from airflow_llm_router.engine.releases import RELEASE_HELPS, ReleaseListener
from airflow_llm_router.engine.restore import LoadQuotas, QuotaSource, Steps
from airflow_llm_router.engine.scripts import OPERATIONS, script_source
from airflow_llm_router.engine.slots import SlotRetry, retried_in_migration
from airflow_llm_router.engine.steps import Command, Script
from airflow_llm_router.engine.types import Admission, AdmitRequest, RouterSettings

__all__ = ["AsyncRouterClient"]

R = TypeVar("R")

#: Operations that wait for the client's send stamps on their way (:meth:`_stamp`).
_AFTER_STAMPS = frozenset({"admit", "complete"})


class AsyncRouterClient(RouterAPI, AsyncDriver):
    """Asyncio client over a ``redis.asyncio.Redis``; every method returns an awaitable."""

    def __init__(
        self, client: aioredis.Redis, settings: RouterSettings | None = None, *,
        quota_source: QuotaSource | None = None,
    ) -> None:
        self.redis = client
        self.core = RouterCore(settings or RouterSettings())
        if isinstance(client, aioredis.RedisCluster):
            self.core.check_cluster()
        self.quota_source = quota_source
        watch_master(client, self.core)
        self._scripts = {op: client.register_script(script_source(op)) for op in OPERATIONS}
        self._releases = ReleaseListener(client, self.core.keys.released_channel,
                                         self.sharded_pubsub)
        self._merger = ScriptMerger(self._script)
        #: send stamps on their way to Redis, which admissions and settlements wait for
        #: (:meth:`_stamp`)
        self._stamping: set[asyncio.Future[Any]] = set()

    @classmethod
    def from_url(cls, url: str, settings: RouterSettings | None = None, *,
                 quota_source: QuotaSource | None = None) -> AsyncRouterClient:
        """A client for one node, a cluster or a Sentinel-watched master (the URL forms are
        in :mod:`~airflow_llm_router.engine.connect`); on one node, callers queue for one
        of 32 connections rather than fail."""
        return cls(async_redis(target_from_url(url)), settings, quota_source=quota_source)

    async def _drive(self, step: Steps[R]) -> R:
        reply: Any = None
        try:
            while True:
                reply = await self._run(step.send(reply))
        except StopIteration as done:
            result: R = done.value
            return result

    async def _run(self, action: Script | Command | LoadQuotas) -> Any:
        if isinstance(action, Command):
            return await self._retried(str(action.args[0]),
                                       lambda: self.redis.execute_command(*action.args))
        if isinstance(action, LoadQuotas):
            return await asyncio.to_thread(self._load_quotas)
        if action.items is None:
            return await self._script(action)
        if action.op == "sent":
            return await self._stamp(action)
        return await self._merger.call(action)

    async def _stamp(self, action: Script) -> Any:
        """Run a send stamp; the admission and settlement calls this client sends to Redis
        from now on wait for it (:meth:`_script`).

        A stamp moves its call's window entry to the send. An admission decided before it
        lands sees the entry at its admission and trims it once that is a window + guard
        ago: a call sent that late (its event loop stalled) or stamped that late (refused
        while the slot migrated, as admissions went on) goes uncounted until the stamp
        restores it (``sent.lua``), though the backend counts it from its arrival; and a
        settlement before the stamp leaves nothing to restore. While a slot migration
        refuses the stamp, the admissions wait with it (they would be refused too).
        Measured on drains across a resharding at 0.25 s windows: 5 of 36 had calls over
        the rpm at the backend without this order and the restore, 0 of 28 with them."""
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._stamping.add(done)
        try:
            return await self._merger.call(action)
        finally:
            self._stamping.discard(done)
            done.set_result(None)

    async def _script(self, action: Script) -> Any:
        if action.op in _AFTER_STAMPS and self._stamping:
            await asyncio.wait(set(self._stamping))  # each merged call once: see _stamp
        keys, args = self.core.script_keys(action), [self.core.settings_arg, *action.argv()]
        wait = self.core.wait_args(action.op)
        if wait is None:
            return await self._retried(
                action.op, lambda: self._scripts[action.op](keys=keys, args=args))
        # the WAIT must follow the script on the same connection: one pipeline
        pipe = self.redis.pipeline(transaction=False)
        await self._scripts[action.op](keys=keys, args=args, client=pipe)
        pipe.execute_command(*wait)
        reply, acked = await pipe.execute()
        self.core.replicated(action.op, acked)
        return reply

    async def _retried(self, op: str, call: Callable[[], Awaitable[Any]]) -> Any:
        """``await call()``, retried while a slot migration refuses it or the cluster
        client closes its connection refreshing the slot map (``slots.py``)."""
        retry = SlotRetry(op, self.core.settings.namespace)
        while True:
            try:
                return await call()
            except (redis.RedisError, AttributeError) as err:
                if not retried_in_migration(err):
                    raise
                await asyncio.sleep(retry.pause(err))

    @property
    def releases(self) -> ReleaseListener:
        """Wakes waiters when any caller releases capacity or changes a quota."""
        return self._releases

    async def wait_for_admission(
        self, request: AdmitRequest, timeout_s: float
    ) -> Admission | None:
        """Wait until ``request`` is admitted (None after ``timeout_s``), waking on releases.

        :raises ImpossibleRequestError: no allowed model could ever admit it.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        await self._releases.start()
        while True:
            seen = self._releases.mark()
            decision = single_decision((await self.admit_many([request]))[0])
            if isinstance(decision, Admission):
                return decision
            left = deadline - loop.time()
            if left <= 0:
                await self.cancel([request.request_id])
                return None
            await self._releases.wait(seen, min(left, decision.retry_after_ms / 1000),
                                      releases=decision.reason in RELEASE_HELPS)

    async def aclose(self) -> None:
        await self._releases.stop()
        await self.redis.aclose()
