"""The router's policy, with no I/O: which script, which arguments, how to read the reply.

Every operation is a generator that yields the Redis steps it needs (:class:`Script` or
:class:`Command`) and returns the decoded result. The sync and asyncio clients only run the
steps (``sync_client.py``, ``async_client.py``), so the two can never drift apart. Checking
and encoding what callers send (requests, completions) lives in ``encoding.py``, reading
what the scripts answer in ``decoding.py``; the steps themselves (:class:`Script`,
:class:`Command`) in ``steps.py``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from airflow_llm_router.engine.advice import Advice, advise_from_stats
from airflow_llm_router.engine.decoding import Decision, complete_status, decode_decision, text
from airflow_llm_router.engine.encoding import Completion, encode_completion, encode_request
from airflow_llm_router.engine.history import (
    HISTORY_MODELS_PER_CALL,
    RouterHistory,
    history_span_ms,
)
from airflow_llm_router.engine.keys import RouterKeys, lease_model
from airflow_llm_router.engine.quota import ModelQuota, RouterBudget, validate_model_name
from airflow_llm_router.engine.scripts import model_keys
from airflow_llm_router.engine.stats import RouterStats
from airflow_llm_router.engine.steps import DURABLE_OPS, Command, Script, Step
from airflow_llm_router.engine.types import (
    AdmitRequest,
    RouterSettings,
)
from airflow_llm_router.exceptions import ReplicationLagError, RouterError

__all__ = ["Command", "RouterCore", "Script", "Step"]

T = TypeVar("T")

#: Requests (or completions) per admit (complete) script call: bounds one call's time on the
#: Redis thread and the arguments of its batched Redis calls.
ADMIT_CHUNK = 256
#: Times a call that may touch every model re-reads the list of models after the script
#: found one it did not declare (added since), before giving up.
STALE_RETRIES = 2


def _unique(names: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def _lease_models(lease_ids: Sequence[str]) -> tuple[str, ...]:
    return _unique(m for m in map(lease_model, lease_ids) if m is not None)


class RouterCore:
    """Policy of one router namespace, shared by :class:`RouterClient` and the async client."""

    def __init__(self, settings: RouterSettings) -> None:
        self.settings = settings
        self.keys = RouterKeys(settings.namespace)
        #: The models with a quota, as last read: declared by calls that may touch any
        #: model; re-read when a script finds one missing (:meth:`_any_model`).
        self.models: tuple[str, ...] | None = None
        #: The head of the order any-model requests try the models in, as the last admit
        #: call named it (lib/anyorder.lua): what such requests declare, instead of every
        #: model; None until a call names it (an engine that does not: every model).
        self.head: tuple[str, ...] | None = None
        s = settings
        self.settings_arg = "|".join([
            *(str(int(v)) for v in (
                s.lease_ttl_s * 1000,
                s.guard_ms,
                s.max_wait_ms,
                s.starve_ms,
                s.waiter_ttl_ms,
                s.cooldown_ms,
                s.breaker_failures,
                s.breaker_open_ms,
            )),
            f"{s.recovery_share:.6f}",
            f"{s.guard_share:.6f}",
            f"{s.hot_share:.6f}",
        ])

    def script_keys(self, action: Script) -> list[str]:
        """``KEYS`` of a script call: the router-wide keys and, for each of its models, the
        per-model keys its operation uses."""
        return self.keys.script_keys(model_keys(action.op), action.models)

    def read_models(self) -> Step[tuple[str, ...]]:
        """Re-read the models with a quota (:attr:`models`)."""
        raw = yield Command(("HKEYS", self.keys.router("K_QUOTAS")))
        self.models = tuple(sorted(text(m) for m in raw or ()))
        return self.models

    def _any_model(self, call: Callable[[tuple[str, ...]], Step[T]],
                   stale: Callable[[T], bool]) -> Step[T]:
        """Run ``call(models)``, a step declaring ``models`` (every model with a quota, as
        last read), again with the models re-read while ``stale(reply)`` says the script
        met a model it had not declared."""
        known = self.models
        if known is None:
            known = yield from self.read_models()
        for _ in range(STALE_RETRIES):
            reply = yield from call(known)
            if not stale(reply):
                return reply
            known = yield from self.read_models()
        reply = yield from call(known)
        if stale(reply):
            raise self._outpaced(STALE_RETRIES + 1)
        return reply

    def _outpaced(self, tries: int) -> RouterError:
        """The error of a call still meeting undeclared models after ``tries`` tries."""
        return RouterError(
            f"router namespace {self.settings.namespace!r}: models were added faster "
            f"than this client could declare them ({tries} tries); retry")

    def wait_args(self, op: str) -> tuple[Any, ...] | None:
        """The ``WAIT`` to send after ``op`` on the same connection, or None."""
        n = self.settings.replicas_to_wait
        if n <= 0 or op not in DURABLE_OPS:
            return None
        return ("WAIT", n, self.settings.replica_wait_ms)

    def check_cluster(self) -> None:
        """On a Redis Cluster: refuse ``replicas_to_wait`` (a cluster's ``WAIT`` cannot be
        routed to the namespace's node through its pipeline)."""
        if self.settings.replicas_to_wait:
            raise ValueError(
                f"replicas_to_wait: {self.settings.replicas_to_wait}: waiting for replicas "
                "works on one node or a Sentinel-watched master, not a Redis Cluster; "
                "set it to 0")

    def replicated(self, op: str, acked: Any) -> None:
        """Raise unless ``acked`` (``WAIT``'s reply) reached ``replicas_to_wait``."""
        n = self.settings.replicas_to_wait
        if int(acked) < n:
            raise ReplicationLagError(
                f"{op}: {int(acked)} of {n} replica(s) acknowledged it within "
                f"{self.settings.replica_wait_ms} ms; the master may be cut off from its "
                "replicas (a failover in progress?), so it is not handed out: retry")

    # -- quotas -----------------------------------------------------------------------

    def set_quota(self, model: str, quota: ModelQuota | dict[str, Any]) -> Step[bool]:
        validate_model_name(model)
        if not isinstance(quota, ModelQuota):
            quota = ModelQuota.parse(quota)
        created = yield Script("set_quota", (model, quota.to_redis()), models=(model,))
        if self.models is not None and model not in self.models:
            self.models = (*self.models, model)
        return bool(created)

    def get_quotas(self) -> Step[dict[str, ModelQuota]]:
        raw = yield Command(("HGETALL", self.keys.router("K_QUOTAS")))
        quotas = {text(k): ModelQuota.from_redis(v) for k, v in (raw or {}).items()}
        return dict(sorted(quotas.items()))

    def get_quota(self, model: str) -> Step[ModelQuota | None]:
        raw = yield Command(("HGET", self.keys.router("K_QUOTAS"), model))
        return None if raw is None else ModelQuota.from_redis(raw)

    def late_after_s(self, model: str) -> Step[float | None]:
        # the late point the engine keeps per model (K_LATE, lib/speed.lua), the figure
        # an admission on it returns
        raw = yield Command(("ZSCORE", self.keys.router("K_LATE"), model))
        late = None if raw is None else float(raw)
        return late / 1000 if late is not None and math.isfinite(late) else None

    def delete_quota(self, model: str) -> Step[bool]:
        deleted = yield Script("delete_quota", (model,), models=(model,))
        return bool(deleted)

    def set_budget(self, budget: RouterBudget | dict[str, Any] | None) -> Step[None]:
        if budget is not None and not isinstance(budget, RouterBudget):
            budget = RouterBudget.parse(budget)
        yield Script("set_budget", ("" if budget is None else budget.to_redis(),))

    def get_budget(self) -> Step[RouterBudget | None]:
        b, per = yield Command(("HMGET", self.keys.router("K_SPEND"), "*|b", "*|per"))
        if b is None:
            return None
        return RouterBudget(budget_micro_usd=int(b), budget_period_s=int(per) / 1000)

    # -- admission --------------------------------------------------------------------

    def admit_many(self, requests: Sequence[AdmitRequest]) -> Step[list[Decision]]:
        decisions: list[Decision] = []
        for start in range(0, len(requests), ADMIT_CHUNK):
            chunk = requests[start : start + ADMIT_CHUNK]
            reply = yield from self._admit_chunk(chunk)
            decisions.extend(decode_decision(r, d, self.settings.jitter)
                             for r, d in zip(chunk, reply, strict=True))
        return decisions

    def _admit_chunk(self, chunk: Sequence[AdmitRequest]) -> Step[Any]:
        """One admit call: it declares the models the requests name and, if any may go to
        any model, the head of the order such requests try (:attr:`head`), or every model
        known while no head is known yet. Requests that answer stale
        (they would try a model not declared) are sent again declaring more: the head the
        reply names and the model they met, then every model, re-read."""
        items = [encode_request(r) for r in chunk]
        if all(r.models is not None for r in chunk):
            named = _unique(m for r in chunk for m in r.models or ())
            got = yield Script("admit", items=tuple(items), models=named)
            return self._take_head(got, len(items))  # merged with any-model callers
        every = self.head is None
        rereads = ("read",) * STALE_RETRIES
        tries = ("all", *rereads) if every else ("head", "head", *rereads)
        reply: list[Any] = [None] * len(items)
        todo = list(range(len(items)))
        met: tuple[str, ...] = ()  # models requests went stale on
        for how in tries:
            if how == "head":
                declared = (*(self.head or ()), *met)
            elif how == "read" or self.models is None:
                declared = yield from self.read_models()
            else:
                declared = self.models
            named = _unique(m for k in todo for m in chunk[k].models or ())
            got = yield Script("admit", items=tuple(items[k] for k in todo),
                               models=_unique((*named, *declared)))
            got = self._take_head(got, len(todo))
            for k, d in zip(todo, got, strict=True):
                reply[k] = d
            todo = [k for k in todo if text(reply[k][0]) == "S"]
            if not todo:
                return reply
            met = _unique((*met, *(text(reply[k][1]) for k in todo)))
        raise self._outpaced(len(tries))

    def _take_head(self, reply: Sequence[Any], n: int) -> list[Any]:
        """The decisions of an admit reply (its first ``n`` entries); the head it names
        after them, if any, becomes :attr:`head`."""
        if len(reply) > n and text(reply[n][0]) == "H":
            self.head = tuple(text(m) for m in reply[n][1:])
        return list(reply[:n])

    def heartbeat_many(self, lease_ids: Sequence[str]) -> Step[list[float | None]]:
        if not lease_ids:
            return []
        reply = yield Script("heartbeat", items=tuple(lease_ids),
                             models=_lease_models(lease_ids))
        return [None if int(ttl) < 0 else int(ttl) / 1000 for ttl in reply]

    def complete_many(self, completions: Sequence[Completion]) -> Step[list[str]]:
        """Statuses: ``released``, ``settled`` (lease had expired), ``unknown``."""
        if not completions:
            return []
        statuses: list[str] = []
        for start in range(0, len(completions), ADMIT_CHUNK):
            chunk = completions[start : start + ADMIT_CHUNK]
            reply = yield Script("complete", items=tuple(encode_completion(c) for c in chunk),
                                 models=_lease_models([c.lease_id for c in chunk]))
            statuses.extend(complete_status(x) for x in reply)
        return statuses

    def mark_sent(self, lease_ids: Sequence[str],
                  ago_s: Sequence[float] | None = None) -> Step[int]:
        if not lease_ids:
            return 0
        if ago_s is None:
            items: tuple[Any, ...] = tuple(lease_ids)
        else:
            if len(ago_s) != len(lease_ids):
                raise ValueError(f"ago_s: {len(ago_s)} values for {len(lease_ids)} leases; "
                                 "give one per lease")
            bad = [a for a in ago_s if isinstance(a, bool) or not math.isfinite(a)]
            if bad:
                raise ValueError(f"ago_s: {bad[0]!r} is not a finite number of seconds")
            items = tuple([lid, max(0, int(ago * 1000))]
                          for lid, ago in zip(lease_ids, ago_s, strict=True))
        moved = yield Script("sent", items=items, models=_lease_models(lease_ids))
        return sum(int(m) for m in moved)

    def cancel(self, request_ids: Sequence[str]) -> Step[int]:
        if not request_ids:
            return 0
        n = yield Script("cancel", (json.dumps(list(request_ids)),))
        return int(n)

    def report_backlog(self, source: str, tasks: int, ttl_s: float) -> Step[int]:
        if not isinstance(source, str) or not source:
            raise ValueError(f"source: {source!r} is not a name; give the backlog's name "
                             "(a task store's queue)")
        if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 0:
            raise ValueError(f"tasks: {tasks!r} is not a count; give a whole number >= 0")
        if isinstance(ttl_s, bool) or not math.isfinite(ttl_s) or ttl_s <= 0:
            raise ValueError(f"ttl_s: {ttl_s!r}; give how long the report holds, in "
                             "seconds above 0")
        live = yield Script("backlog", (json.dumps([source, tasks, int(ttl_s * 1000)]),))
        return int(live)

    def sharded_pubsub(self) -> Step[bool]:
        """Whether the scripts publish events sharded (SPUBLISH, Redis 7+), so listeners
        subscribe to match (pubsub_mode.lua decides, from the server's version)."""
        mode = yield Script("pubsub_mode")
        return bool(mode)

    def stats(self, models: Sequence[str] | None = None) -> Step[RouterStats]:
        def read(names: tuple[str, ...], arg: str) -> Step[Any]:
            reply = yield Script("stats", (arg,), models=names)
            return json.loads(text(reply))

        if models:
            names = _unique(models)
            doc = yield from read(names, json.dumps(list(names)))
        else:  # every model with a quota
            doc = yield from self._any_model(lambda known: read(known, "0"),
                                             lambda doc: "stale" in doc)
        quotas = yield from self.get_quotas()
        return RouterStats.from_reply(doc, quotas)

    def history(self, models: Sequence[str] | None = None,
                minutes: int = 60) -> Step[RouterHistory]:
        """The traffic buckets of ``models`` (every model with a quota if None) over the last
        ``minutes``, read :data:`HISTORY_MODELS_PER_CALL` models per script call."""
        span = history_span_ms(minutes)
        if models is None:
            names = list((yield from self.get_quotas()))
        else:
            names = [validate_model_name(m) for m in models]
        replies = []
        for start in range(0, max(1, len(names)), HISTORY_MODELS_PER_CALL):
            chunk = names[start : start + HISTORY_MODELS_PER_CALL]
            replies.append((yield Script("history", (json.dumps(chunk), span),
                                         models=tuple(chunk))))
        return RouterHistory.from_replies(replies, span)

    def advice(
        self,
        backlog: int,
        per_solver_in_flight: int = 100,
        max_solvers: int = 16,
        input_tokens_per_call: float = 0,
        backlog_kinds: Mapping[str, int] | None = None,
    ) -> Step[Advice]:
        stats = yield from self.stats()
        return advise_from_stats(stats, backlog=backlog,
                                 per_solver_in_flight=per_solver_in_flight,
                                 max_solvers=max_solvers,
                                 input_tokens_per_call=input_tokens_per_call,
                                 backlog_kinds=backlog_kinds)
