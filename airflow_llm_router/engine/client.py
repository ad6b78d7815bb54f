"""The router's clients: a sync one (for hooks and workers) and an asyncio one (triggers).

Both expose the same methods, defined once in :class:`_RouterAPI`: each runs a
:class:`~airflow_llm_router.engine.core.RouterCore` operation through ``_drive``, which the
sync client implements with blocking calls and the async client with awaited ones (its
methods return awaitables). Only waiting for capacity differs in kind (threads block on the
pub/sub socket, coroutines on an event) and is written per client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import redis
import redis.asyncio as aioredis

from airflow_llm_router.engine.advice import Advice
from airflow_llm_router.engine.core import (
    ADMIT_CHUNK,
    Command,
    Completion,
    Decision,
    RouterCore,
    Script,
    Step,
)
from airflow_llm_router.engine.quota import ModelQuota
from airflow_llm_router.engine.restore import (
    LoadQuotas,
    QuotaSource,
    admit_restoring,
    quotas_synced,
    sync_quotas,
    with_quotas,
)
from airflow_llm_router.engine.scripts import OPERATIONS, script_source
from airflow_llm_router.engine.stats import RouterStats
from airflow_llm_router.engine.types import (
    Admission,
    AdmitRequest,
    Outcome,
    Priority,
    Rejection,
    RouterSettings,
    Wait,
)
from airflow_llm_router.exceptions import ImpossibleRequestError, LeaseNotFoundError

__all__ = ["AsyncRouterClient", "RouterClient", "ScriptMerger"]

log = logging.getLogger(__name__)


def _single(decision: Decision) -> Admission | Wait:
    if isinstance(decision, Rejection):
        raise ImpossibleRequestError(decision.reason, decision.message())
    return decision


class _RouterAPI:
    """The public operations; ``_drive`` runs a core step generator to its result."""

    core: RouterCore
    #: Where lost quotas are restored from (see :mod:`~airflow_llm_router.engine.restore`).
    quota_source: QuotaSource | None = None

    def _drive(self, step: Step[Any]) -> Any:
        raise NotImplementedError

    def _then(self, result: Any, fn: Any) -> Any:
        raise NotImplementedError

    @property
    def settings(self) -> RouterSettings:
        return self.core.settings

    def set_quota(self, model: str, quota: ModelQuota | dict[str, Any]) -> bool:
        """Create or replace ``model``'s quota (validated); returns True if it was new.

        The change applies at the next admission of every caller, no restart needed.
        """
        return self._drive(self.core.set_quota(model, quota))

    def get_quotas(self) -> dict[str, ModelQuota]:
        """Every model's quota, by model name."""
        return self._drive(self.core.get_quotas())

    def get_quota(self, model: str) -> ModelQuota | None:
        return self._drive(self.core.get_quota(model))

    def delete_quota(self, model: str) -> bool:
        """Remove ``model``'s quota; returns False if it had none."""
        return self._drive(self.core.delete_quota(model))

    def quotas_synced(self) -> bool:
        """Whether Redis holds what the last sync from the durable quota store wrote
        (False after Redis lost its data; see :mod:`~airflow_llm_router.engine.restore`)."""
        return self._drive(quotas_synced(self.core))

    def sync_quotas(self, quotas: Mapping[str, ModelQuota]) -> int:
        """Write each of ``quotas`` that Redis lacks and mark Redis as synced with the
        durable store; returns how many were written."""
        return self._drive(sync_quotas(self.core, quotas))

    def admit_many(self, requests: Sequence[AdmitRequest]) -> list[Decision]:
        """Decide many requests in one round trip per 256: each gets an
        :class:`Admission`, a :class:`Wait` or a :class:`Rejection` (never raises for one)."""
        return self._drive(self._admit(requests))

    def _admit(self, requests: Sequence[AdmitRequest]) -> Step[list[Decision]]:
        if self.quota_source is None:
            return self.core.admit_many(requests)
        return admit_restoring(self.core, requests)

    def _reading(self, step: Step[Any]) -> Step[Any]:
        """Readers of the stats first restore lost quotas (see ``with_quotas``)."""
        return step if self.quota_source is None else with_quotas(self.core, step)

    def _load_quotas(self) -> dict[str, ModelQuota] | None:
        """Read the quota source; a failure is logged, not raised (the caller then gets the
        rejection it would have had without a source)."""
        assert self.quota_source is not None
        try:
            return dict(self.quota_source())
        except Exception as err:
            log.warning("Redis lost its quotas and the quota source could not be read to "
                        "restore them: %s: %s", type(err).__name__, err)
            return None

    def admit(
        self,
        estimated_tokens: int | None = None,
        *,
        input_tokens: int | None = None,
        models: Sequence[str] | None = None,
        ordered: bool = True,
        priority: Priority = "bulk",
        request_id: str | None = None,
        estimated_output_tokens: int | None = None,
    ) -> Admission | Wait:
        """Reserve capacity for one call, or learn how long to wait.

        Give ``estimated_tokens`` (input + output), or ``input_tokens`` and let the engine
        add the chosen model's learned output per call.

        :raises ImpossibleRequestError: no allowed model could ever admit it.
        """
        request = AdmitRequest(
            estimated_tokens=estimated_tokens,
            estimated_output_tokens=estimated_output_tokens,
            input_tokens=input_tokens,
            models=tuple(models) if models is not None else None,
            ordered=ordered,
            priority=priority,
            **({"request_id": request_id} if request_id else {}),
        )
        return self._then(self._drive(self._admit([request])), lambda d: _single(d[0]))

    def heartbeat_many(self, lease_ids: Sequence[str]) -> list[float | None]:
        """Extend leases; each entry is the new TTL in seconds or None if the lease is gone."""
        return self._drive(self.core.heartbeat_many(lease_ids))

    def heartbeat(self, lease_id: str) -> float:
        """Extend one lease by the lease TTL.

        :raises LeaseNotFoundError: the lease expired (its slot was freed) or was completed.
        """
        return self._then(self._drive(self.core.heartbeat_many([lease_id])),
                          lambda ttls: _alive(lease_id, ttls[0]))

    def complete_many(self, completions: Sequence[Completion]) -> list[str]:
        """Settle many leases; statuses ``released``, ``settled`` or ``unknown``."""
        return self._drive(self.core.complete_many(completions))

    def complete(
        self,
        lease_id: str,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        outcome: Outcome = "ok",
        retry_after_s: float | None = None,
    ) -> str:
        """Free the lease's slot, settle actual tokens, and report how the call went."""
        done = Completion(lease_id, input_tokens, output_tokens, outcome, retry_after_s)
        return self._then(self._drive(self.core.complete_many([done])), lambda s: s[0])

    def mark_sent(self, lease_ids: Sequence[str]) -> int:
        """Tell the engine these leases' calls have just been sent to the backend.

        Their window entries restart from now, so a call that waited (in a connection
        pool, say) before reaching the backend still counts for a full window from when the
        backend saw it. Call it right after sending; it only ever makes the window stricter.
        """
        return self._drive(self.core.mark_sent(lease_ids))

    def cancel(self, request_ids: Sequence[str]) -> int:
        """Withdraw waiting requests whose caller gave up."""
        return self._drive(self.core.cancel(request_ids))

    def stats(self, models: Sequence[str] | None = None) -> RouterStats:
        """Current window usage, in-flight calls, health and counters per model."""
        return self._drive(self._reading(self.core.stats(models)))

    def advice(
        self,
        backlog: int,
        per_solver_in_flight: int = 100,
        max_solvers: int = 16,
        input_tokens_per_call: float = 0,
    ) -> Advice:
        """How many solvers saturate the quotas for ``backlog`` waiting tasks (Little's law
        on each model's rate limit and latency; see :mod:`airflow_llm_router.engine.advice`).

        :param input_tokens_per_call: input tokens assumed per call for a model with no
            request in its current window.
        """
        return self._drive(self._reading(self.core.advice(
            backlog, per_solver_in_flight, max_solvers, input_tokens_per_call)))


def _alive(lease_id: str, ttl: float | None) -> float:
    if ttl is None:
        raise LeaseNotFoundError(f"lease {lease_id!r} expired or was completed")
    return ttl


class RouterClient(_RouterAPI):
    """Blocking client over a ``redis.Redis`` connection."""

    def __init__(self, client: redis.Redis, settings: RouterSettings | None = None, *,
                 quota_source: QuotaSource | None = None) -> None:
        self.redis = client
        self.core = RouterCore(settings or RouterSettings())
        self.quota_source = quota_source
        self._scripts = {op: client.register_script(script_source(op)) for op in OPERATIONS}

    @classmethod
    def from_url(cls, url: str, settings: RouterSettings | None = None, *,
                 quota_source: QuotaSource | None = None) -> RouterClient:
        return cls(redis.Redis.from_url(url), settings, quota_source=quota_source)

    def _drive(self, step: Step[Any]) -> Any:
        reply = None
        try:
            while True:
                reply = self._run(step.send(reply))
        except StopIteration as done:
            return done.value

    def _then(self, result: Any, fn: Any) -> Any:
        return fn(result)

    def _run(self, action: Script | Command | LoadQuotas) -> Any:
        if isinstance(action, Command):
            return self.redis.execute_command(*action.args)
        if isinstance(action, LoadQuotas):
            return self._load_quotas()
        return self._scripts[action.op](
            keys=[self.core.keys.prefix], args=[self.core.settings_arg, *action.argv()]
        )

    def wait_for_admission(self, request: AdmitRequest, timeout_s: float) -> Admission | None:
        """Block until ``request`` is admitted (None after ``timeout_s``), waking on releases.

        :raises ImpossibleRequestError: no allowed model could ever admit it.
        """
        deadline = time.monotonic() + timeout_s
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.core.keys.released_channel)
        try:
            while True:
                decision = _single(self.admit_many([request])[0])
                if isinstance(decision, Admission):
                    return decision
                left = deadline - time.monotonic()
                if left <= 0:
                    self.cancel([request.request_id])
                    return None
                pubsub.get_message(timeout=min(left, decision.retry_after_ms / 1000))
        finally:
            pubsub.close()

    def drop_namespace(self) -> int:
        """Delete every key of this client's namespace: quotas, windows, leases, counters
        (what a Redis restart without persistence does). For tests, demos and benchmarks
        that made a namespace of their own; returns how many keys there were."""
        keys = list(self.redis.scan_iter(match=self.core.keys.prefix + "*", count=1000))
        return int(self.redis.delete(*keys)) if keys else 0

    def close(self) -> None:
        self.redis.close()


class AsyncRouterClient(_RouterAPI):
    """Asyncio client over a ``redis.asyncio.Redis``; every method returns an awaitable."""

    def __init__(
        self, client: aioredis.Redis, settings: RouterSettings | None = None, *,
        quota_source: QuotaSource | None = None,
    ) -> None:
        self.redis = client
        self.core = RouterCore(settings or RouterSettings())
        self.quota_source = quota_source
        self._scripts = {op: client.register_script(script_source(op)) for op in OPERATIONS}
        self._releases = ReleaseListener(client, self.core.keys.released_channel)
        self._merger = ScriptMerger(self._script)

    @classmethod
    def from_url(cls, url: str, settings: RouterSettings | None = None, *,
                 quota_source: QuotaSource | None = None) -> AsyncRouterClient:
        """A client whose callers queue for one of 32 connections rather than fail."""
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=32, timeout=None)
        return cls(aioredis.Redis(connection_pool=pool), settings, quota_source=quota_source)

    async def _drive(self, step: Step[Any]) -> Any:  # type: ignore[override]
        reply = None
        try:
            while True:
                reply = await self._run(step.send(reply))
        except StopIteration as done:
            return done.value

    async def _then(self, result: Any, fn: Any) -> Any:  # type: ignore[override]
        return fn(await result)

    async def _run(self, action: Script | Command | LoadQuotas) -> Any:
        if isinstance(action, Command):
            return await self.redis.execute_command(*action.args)
        if isinstance(action, LoadQuotas):
            return await asyncio.to_thread(self._load_quotas)
        if action.items is not None:
            return await self._merger.call(action)
        return await self._script(action)

    async def _script(self, action: Script) -> Any:
        return await self._scripts[action.op](
            keys=[self.core.keys.prefix], args=[self.core.settings_arg, *action.argv()]
        )

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
            decision = _single((await self.admit_many([request]))[0])
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


class ScriptMerger:
    """Merge the list operations that coroutines start in one event-loop turn into one
    script call per operation (up to ``MERGE_LIMIT`` items), and split the reply.

    Sixteen coroutines each admitting one prompt then cost Redis about what one call of
    sixteen does: most of a call's cost on the Redis thread is fixed, not per item.
    """

    MERGE_LIMIT = ADMIT_CHUNK  # the same bound on one call's time on the Redis thread

    def __init__(self, run: Any) -> None:
        self._run = run
        self._pending: dict[str, list[tuple[Script, asyncio.Future[list[Any]]]]] = {}
        self._sending: set[asyncio.Task[None]] = set()

    async def call(self, action: Script) -> list[Any]:
        queue = self._pending.get(action.op)
        if queue is None:
            queue = self._pending[action.op] = []
            asyncio.get_running_loop().call_soon(self._flush, action.op)
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        queue.append((action, future))
        return await future

    def _flush(self, op: str) -> None:
        queue = self._pending.pop(op, [])
        group: list[tuple[Script, asyncio.Future[list[Any]]]] = []
        size = 0
        for entry in queue:
            n = len(entry[0].items or ())
            if group and size + n > self.MERGE_LIMIT:
                self._start(op, group)
                group, size = [], 0
            group.append(entry)
            size += n
        if group:
            self._start(op, group)

    def _start(self, op: str, group: list[tuple[Script, asyncio.Future[list[Any]]]]) -> None:
        task = asyncio.get_running_loop().create_task(self._send(op, group))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, op: str, group: list[tuple[Script, asyncio.Future[list[Any]]]]) -> None:
        items = tuple(item for action, _ in group for item in action.items or ())
        try:
            reply = await self._run(Script(op, items=items))
        except Exception as err:
            for _, future in group:
                if not future.done():
                    future.set_exception(err)
            return
        start = 0
        for action, future in group:
            n = len(action.items or ())
            if not future.done():
                future.set_result(list(reply[start:start + n]))
            start += n


#: Wait reasons a release can end: a freed slot, tokens settled below their estimate, a
#: finished breaker probe. A wait for rpm or a cooldown ends only with time (its retry
#: after is exact) or a quota change, so such waiters sleep through releases.
RELEASE_HELPS = frozenset({"concurrency", "tpm", "input_tpm", "output_tpm", "breaker"})


class ReleaseListener:
    """One pub/sub subscription per client, shared by all its waiting coroutines.

    ``generation`` counts every event seen (releases, quota changes, pokes); ``changes``
    only quota changes and pokes. A waiter takes :meth:`mark` before asking for admission
    and then waits for it to move, so an event between the answer and the wait is not
    missed; a waiter that no release can help waits on ``changes`` only, so the releases
    of a busy router do not wake it for nothing.
    """

    def __init__(self, client: aioredis.Redis, channel: str) -> None:
        self._client = client
        self._channel = channel
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Event | None = None
        self._changed: asyncio.Condition | None = None
        self.generation = 0
        self.changes = 0

    def mark(self) -> tuple[int, int]:
        """The counters now, for :meth:`wait`."""
        return self.generation, self.changes

    async def start(self) -> None:
        if self._task is not None:
            return
        self._ready = asyncio.Event()
        self._changed = asyncio.Condition()
        self._task = asyncio.create_task(self._listen(), name="llm-router-releases")
        await self._ready.wait()

    async def _listen(self) -> None:
        """Subscribe and count events; after a lost connection (a Redis restart),
        subscribe again with backoff, waking every waiter once (events may have been
        missed meanwhile). Waiters never depend on it alone: each waits with a timeout."""
        assert self._ready is not None and self._changed is not None
        pause = 0.05
        while True:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._channel)
                self._ready.set()
                pause = 0.05
                async for message in pubsub.listen():
                    if message.get("type") != "message":
                        continue
                    async with self._changed:
                        self.generation += 1
                        if message.get("data") not in (b"*", "*"):  # not a release: a quota
                            self.changes += 1
                        self._changed.notify_all()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                    OSError) as err:
                log.warning("release channel lost (%s); subscribing again", type(err).__name__)
                self._ready.set()
                self.poke()
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    def poke(self) -> None:
        """Wake every waiter (a new request joined, say)."""
        self.generation += 1
        self.changes += 1
        if self._changed is not None:
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def wait(self, seen: tuple[int, int], timeout_s: float, *,
                   releases: bool = True) -> bool:
        """Wait until an event after the :meth:`mark` ``seen`` (with ``releases=False``:
        a quota change or a poke); False on timeout."""
        assert self._changed is not None

        def moved() -> bool:
            return self.mark()[0 if releases else 1] != seen[0 if releases else 1]

        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(moved), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False

    async def stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        self._task = None
