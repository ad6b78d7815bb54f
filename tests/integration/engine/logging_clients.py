"""Clients that keep the test's own log of admissions and completions.

Each admit and complete script runs inside MULTI/EXEC together with a TIME command, so the
log holds the Redis server time (µs) at the very moment of each decision: an independent
record, kept by the test, against which window and concurrency limits are checked.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from airflow_llm_router.engine import AsyncRouterClient, RouterClient
from airflow_llm_router.engine.core import Command, Script
from airflow_llm_router.engine.scripts import OPERATIONS, script_source


@dataclass
class Entry:
    model: str
    lease_id: str
    tokens: int
    admitted_us: int
    completed_us: int | None = None


@dataclass
class TrafficLog:
    """Admissions by lease id, filled in by the logging clients."""

    entries: dict[str, Entry] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, op: str, args: tuple[Any, ...], server_us: int, reply: Any) -> None:
        import json

        with self.lock:
            if op == "admit":
                reqs = json.loads(args[0])  # the reply may name the any-model head after
                for req, r in zip(reqs, reply[:len(reqs)], strict=True):
                    if r[0] in (b"A", "A") and not int(r[4]):
                        lid = r[2].decode() if isinstance(r[2], bytes) else r[2]
                        model = r[1].decode() if isinstance(r[1], bytes) else r[1]
                        self.entries[lid] = Entry(model, lid, int(req[2]), server_us)
            elif op == "complete":
                for item, status in zip(json.loads(args[0]), reply, strict=True):
                    entry = self.entries.get(item[0])
                    if entry is not None and int(status) == 1:
                        entry.completed_us = server_us
                        if item[1] >= 0:
                            entry.tokens = item[1] + item[2]

    def for_model(self, model: str) -> list[Entry]:
        return sorted((e for e in self.entries.values() if e.model == model),
                      key=lambda e: e.admitted_us)


def _time_us(reply: Any) -> int:
    return int(reply[0]) * 1_000_000 + int(reply[1])


class LoggedRouterClient(RouterClient):
    def __init__(self, *args: Any, log: TrafficLog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log = log
        self._shas = {op: self.redis.script_load(script_source(op)) for op in OPERATIONS}

    def _run(self, action: Script | Command) -> Any:
        if isinstance(action, Command) or action.op not in ("admit", "complete"):
            return super()._run(action)
        pipe = self.redis.pipeline(transaction=True)
        pipe.time()
        keys = self.core.script_keys(action)
        pipe.evalsha(self._shas[action.op], len(keys), *keys,
                     self.core.settings_arg, *action.argv())
        now, reply = pipe.execute()
        self.log.record(action.op, action.argv(), _time_us(now), reply)
        return reply


class LoggedAsyncRouterClient(AsyncRouterClient):
    def __init__(self, *args: Any, log: TrafficLog, shas: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log = log
        self._shas = shas

    async def _script(self, action: Script) -> Any:
        if action.op not in ("admit", "complete"):
            return await super()._script(action)
        pipe = self.redis.pipeline(transaction=True)
        pipe.time()
        keys = self.core.script_keys(action)
        pipe.evalsha(self._shas[action.op], len(keys), *keys,
                     self.core.settings_arg, *action.argv())
        now, reply = await pipe.execute()
        self.log.record(action.op, action.argv(), _time_us(now), reply)
        return reply


def max_in_window(times_us: list[int], weights: list[int], window_us: int) -> int:
    """Largest weighted count of events in any half-open window (t - W, t]."""
    best = total = lo = 0
    for hi, t in enumerate(times_us):
        total += weights[hi]
        while times_us[lo] <= t - window_us:
            total -= weights[lo]
            lo += 1
        best = max(best, total)
    return best


def max_overlap(intervals: list[tuple[int, int]]) -> int:
    """Most intervals open at one instant; an end at t comes before a start at t."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = cur = 0
    for _, delta in events:
        cur += delta
        best = max(best, cur)
    return best
