"""Fidelity: the real drain against the strict backend (``bench/strict_backend.py``), which
counts every call at arrival in exact sliding windows; on demand, not in CI.

    python -m bench.fidelity                      # every scenario, ~150 prompts each
    python -m bench.fidelity --scenarios a,c --out fidelity.json

Each scenario runs the real ``DrainTrigger`` (as ``bench/soak.py`` does, with its drain
settings) on a backlog in a fresh PostgreSQL schema, with a private ``redis-server`` and
quotas kept in a ``QuotaStore``, against a strict backend in its own process:

- a: the provider's real limit below the quota (real rpm 10, quota rpm 40, 1 s window), the
  backend silent about its limits; a2: the same, the backend stating its limits in
  ``x-ratelimit-*`` headers;
- b1: quota = real limit, ``FLUSHALL`` on the router's Redis once 40 % are solved;
  b2: the same with ``redis-server`` stopped and started again (no persistence);
- c1: a token-bound model whose answers run longer than the quota's estimate, without an
  output cap; c2: the same with the connection's output cap (``max_output_tokens``, sent as
  ``max_tokens``);
- d-a, d-c1, d-c2 (with ``--stress``): a, c1 and c2 while ``stress-ng --cpu 2`` runs.

Per scenario: calls the backend received, 429s, the peak requests and tokens in any window
of every call SENT (refused ones included: what the router let through), against the
router's target, and "windows over target": the number of sent calls that end a window
``(t - window_s, t]`` holding more than the target's requests or tokens. The real limit is
printed beside when it differs from the target (scenario a), with the sent calls that end a
window over it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis
from psycopg import sql

from airflow_llm_router.engine import RouterClient, RouterSettings
from airflow_llm_router.quotas import QuotaStore
from airflow_llm_router.store import TaskStore
from bench.common import interruptible
from bench.soak import DEFAULT_DSN, POLL_S, _run_drain
from bench.strict_backend import StrictBackendProcess
from llm_router_devkit.redis_tools import PrivateRedis

MODEL = "strict-1"


@dataclass
class Scenario:
    name: str
    title: str
    #: the backend's real limits of MODEL (a ``ModelLimits`` dict)
    real: dict[str, Any]
    #: the router's quota of MODEL
    quota: dict[str, Any]
    #: the models_backend connection's extra beyond timeout_s
    connection: dict[str, Any] = field(default_factory=dict)
    cap_field: str = "max_output_tokens"
    rate_limit_headers: bool = False
    #: "flushall" or "restart" once ``fault_at`` of the backlog is solved
    fault: str | None = None
    fault_at: float = 0.4
    stress: bool = False


def _scenarios() -> dict[str, Scenario]:
    w = 1.0
    a_real = {"rpm": 10, "tpm": None, "max_concurrency": None, "window_s": w,
              "output_tokens": [20, 80], "latency_s": [0.05, 0.2]}
    a_quota = {"rpm": 40, "tpm": 1_000_000, "max_concurrency": 100, "window_s": w,
               "expected_output_tokens": 80}
    b_real = {"rpm": 20, "tpm": None, "max_concurrency": None, "window_s": w,
              "output_tokens": [20, 80], "latency_s": [0.05, 0.3]}
    b_quota = {"rpm": 20, "tpm": 1_000_000, "max_concurrency": 100, "window_s": w,
               "expected_output_tokens": 80}
    # answers of 100-600 tokens (mean 350) against an estimate of 100
    c_real = {"rpm": None, "tpm": 6000, "max_concurrency": None, "window_s": w,
              "output_tokens": [100, 600], "latency_s": [0.05, 0.3]}
    c_quota = {"rpm": 10_000, "tpm": 6000, "max_concurrency": 100, "window_s": w,
               "expected_output_tokens": 100}
    cap = {"max_output_tokens": 200, "fields": {"max_output_tokens": "max_tokens"}}
    out = [
        Scenario("a", "real rpm 10 < quota rpm 40, limits unstated", a_real, a_quota),
        Scenario("a2", "real rpm 10 < quota rpm 40, x-ratelimit headers", a_real, a_quota,
                 rate_limit_headers=True),
        Scenario("b1", "FLUSHALL at 40 % solved", b_real, b_quota, fault="flushall"),
        Scenario("b2", "redis-server restart at 40 % solved", b_real, b_quota,
                 fault="restart"),
        Scenario("c1", "output > estimate, no output cap", c_real, c_quota),
        Scenario("c2", "output > estimate, cap 200 as max_tokens", c_real, c_quota,
                 connection=cap, cap_field="max_tokens"),
    ]
    for base in ("a", "c1", "c2"):
        s = next(x for x in out if x.name == base)
        out.append(Scenario(f"d-{base}", f"{s.title}, stress-ng --cpu 2", s.real, s.quota,
                            s.connection, s.cap_field, s.rate_limit_headers, stress=True))
    return {s.name: s for s in out}


def over_target(arrivals: list[list[Any]], window_s: float, rpm: int | None,
                tpm: int | None) -> tuple[int, int, int]:
    """(peak requests, peak tokens, calls ending a window over target) of ``arrivals``
    ([time, input, output, status], sorted by time) in windows ``(t - window_s, t]``."""
    peak_r = peak_t = over = 0
    start = tokens = 0
    for end, (t, inp, out, _) in enumerate(arrivals):
        tokens += inp + out
        while arrivals[start][0] <= t - window_s:
            tokens -= arrivals[start][1] + arrivals[start][2]
            start += 1
        count = end - start + 1
        peak_r, peak_t = max(peak_r, count), max(peak_t, tokens)
        if (rpm is not None and count > rpm) or (tpm is not None and tokens > tpm):
            over += 1
    return peak_r, peak_t, over


def _prompts(n: int, tag: str) -> list[str]:
    """Prompts of 40-400 characters (10-100 input tokens), the same for every run."""
    return [f"{tag} prompt {i}: summarise record {i}. " + "lorem ipsum " * (i * 7 % 31)
            for i in range(n)]


class Run:
    """One scenario: its Redis, schema, backend process and drain."""

    def __init__(self, scenario: Scenario, opts: argparse.Namespace, stack: ExitStack) -> None:
        self.s = scenario
        self.opts = opts
        self.id = uuid.uuid4().hex[:8]
        self.schema = f"llmr_fid_{self.id}"
        self.namespace = f"fid-{self.id}"
        self.redis = PrivateRedis()
        self.redis.start()
        stack.callback(self.redis.close)
        config = {"seed": opts.seed, "cap_field": scenario.cap_field,
                  "rate_limit_headers": scenario.rate_limit_headers,
                  "models": {MODEL: scenario.real}}
        self.backend = stack.enter_context(StrictBackendProcess(config))
        self.store = TaskStore(opts.postgres_dsn, schema=self.schema)
        stack.callback(self._drop_schema)
        stack.callback(self.store.close)
        os.environ.update({
            "AIRFLOW_CONN_LLM_ROUTER_DEFAULT": json.dumps(
                {"conn_type": "llm_router", "host": "127.0.0.1", "port": self.redis.port,
                 "extra": {"namespace": self.namespace, "lease_ttl_s": 10,
                           "quota_schema": self.schema}}),
            "AIRFLOW_CONN_POSTGRES_DEFAULT": opts.postgres_dsn,
            "AIRFLOW_CONN_MODELS_BACKEND_DEFAULT": json.dumps(
                {"conn_type": "models_backend", "host": self.backend.url,
                 "extra": {"timeout_s": 30, **scenario.connection}}),
        })
        self.events: dict[str, Any] = {}

    def _drop_schema(self) -> None:
        with psycopg.connect(self.opts.postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE")
                         .format(sql.Identifier(self.schema)))

    def seed(self) -> None:
        self.store.migrate()
        router = RouterClient.from_url(self.redis.url,
                                       RouterSettings(namespace=self.namespace))
        try:
            quotas = QuotaStore(self.opts.postgres_dsn, router, schema=self.schema)
            quotas.migrate()
            quotas.put(MODEL, self.s.quota, actor="fidelity")
        finally:
            router.close()
        self.store.enqueue(_prompts(self.opts.prompts, self.s.name), allowed_models=[MODEL])

    async def run(self) -> None:
        n = self.opts.prompts
        started = time.monotonic()
        drain = asyncio.create_task(_run_drain(self.schema, f"fid-{self.s.name}",
                                               self.opts.budget))
        done_fault = self.s.fault is None
        while not drain.done():
            await asyncio.sleep(POLL_S)
            if done_fault:
                continue
            solved = await asyncio.to_thread(lambda: self.store.counts()["solved"])
            if solved >= n * self.s.fault_at:
                at = round(time.monotonic() - started, 2)
                if self.s.fault == "flushall":
                    with redis.Redis.from_url(self.redis.url) as client:
                        client.flushall()
                else:
                    self.redis.stop()
                    await asyncio.sleep(0.5)
                    self.redis.start()
                self.events["fault"] = {"kind": self.s.fault, "at_s": at, "solved": solved}
                done_fault = True
        self.events["drain"] = await drain
        self.events["seconds"] = round(time.monotonic() - started, 2)

    def measure(self) -> dict[str, Any]:
        stats = httpx.get(f"{self.backend.url}/stats", timeout=10).json()["models"][MODEL]
        arrivals = httpx.get(f"{self.backend.url}/arrivals", timeout=30).json()[MODEL]
        window = float(self.s.real["window_s"])
        rpm, tpm = self.s.quota["rpm"], self.s.quota["tpm"]
        peak_r, peak_t, over = over_target(arrivals, window, rpm, tpm)
        over_real = over_target(arrivals, window, self.s.real["rpm"], self.s.real["tpm"])[2]
        span = (arrivals[-1][0] - arrivals[0][0]) if arrivals else 0.0
        refused_at = [a[0] - arrivals[0][0] for a in arrivals if a[3] == 429]
        windows = max(1.0, span / window)
        counts = self.store.counts()
        return {
            "scenario": self.s.name, "title": self.s.title,
            "calls": len(arrivals), "rejected_429": stats["rejected_429"],
            "rejected_by_reason": stats["rejected_by_reason"],
            "r429_per_window": round(stats["rejected_429"] / windows, 2),
            "span_s": round(span, 2),
            # when the 429s came, from the first call: all in the first window, or all along
            "first_429_s": round(refused_at[0], 2) if refused_at else None,
            "last_429_s": round(refused_at[-1], 2) if refused_at else None,
            "r429_after_first_window": sum(t >= window for t in refused_at),
            "peak_requests": peak_r, "target_rpm": rpm, "real_rpm": self.s.real["rpm"],
            "peak_tokens": peak_t, "target_tpm": tpm, "real_tpm": self.s.real["tpm"],
            "windows_over_target": over, "windows_over_real_limit": over_real,
            "peak_admitted_requests": stats["peak_requests"],
            "peak_admitted_tokens": stats["peak_tokens"],
            "peak_concurrency": stats["peak_concurrency"],
            "output_tokens_per_call": round(stats["output_tokens"]
                                            / max(1, stats["accepted"]), 1),
            "solved": counts["solved"], "dead": counts["dead"],
            "pending": counts["pending"] + counts["claimed"],
            **self.events,
        }


def _run_one(scenario: Scenario, opts: argparse.Namespace) -> dict[str, Any]:
    with ExitStack() as stack:
        if scenario.stress:
            stress = subprocess.Popen(["stress-ng", "--cpu", "2", "--timeout",
                                       str(int(opts.budget) + 30)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            stack.callback(stress.wait)  # callbacks run last first: terminate, then wait
            stack.callback(stress.terminate)
        run = Run(scenario, opts, stack)
        run.seed()
        asyncio.run(run.run())
        return run.measure()


def _limit(target: int | None, real: int | None, big: int = 1_000_000) -> str:
    shown = "-" if target is None or target >= big else str(target)
    if real is not None and real != target:
        shown += f", real {real}"
    return shown


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| scenario | calls | 429s | 429s after 1st window | peak requests/window "
             "(target) | peak tokens/window (target) | windows over target | solved/dead |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        differs = any(real is not None and real != target for real, target in (
            (r["real_rpm"], r["target_rpm"]), (r["real_tpm"], r["target_tpm"])))
        over_real = f" (over real: {r['windows_over_real_limit']})" if differs else ""
        lines.append(
            f"| {r['scenario']}: {r['title']} | {r['calls']} | {r['rejected_429']} "
            f"({r['r429_per_window']}/window) | {r['r429_after_first_window']} "
            f"| {r['peak_requests']} ({_limit(r['target_rpm'], r['real_rpm'])}) "
            f"| {r['peak_tokens']} ({_limit(r['target_tpm'], r['real_tpm'])}) "
            f"| {r['windows_over_target']}{over_real} | {r['solved']}/{r['dead']} |")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.fidelity", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--scenarios", default="a,a2,b1,b2,c1,c2",
                        help="comma-separated names: " + ", ".join(_scenarios()))
    parser.add_argument("--stress", action="store_true",
                        help="also run d-a, d-c1 and d-c2 (stress-ng --cpu 2 beside)")
    parser.add_argument("--prompts", type=int, default=150, help="tasks per scenario")
    parser.add_argument("--budget", type=float, default=120.0,
                        help="seconds a drain may run")
    parser.add_argument("--seed", type=int, default=1, help="the strict backend's seed")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    parser.add_argument("--out", type=Path, help="also write the JSON results here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    known = _scenarios()
    names = [n.strip() for n in opts.scenarios.split(",") if n.strip()]
    if opts.stress:
        names += [n for n in ("d-a", "d-c1", "d-c2") if n not in names]
    unknown = [n for n in names if n not in known]
    if unknown or opts.prompts < 10:
        print(f"error: unknown scenarios {unknown} or --prompts < 10", file=sys.stderr)
        return 2
    if any(known[n].stress for n in names) and shutil.which("stress-ng") is None:
        print("error: stress-ng is not installed (apt-get install -y stress-ng)",
              file=sys.stderr)
        return 2
    rows = []
    for name in names:
        print(f"running {name}: {known[name].title} ...", file=sys.stderr, flush=True)
        rows.append(_run_one(known[name], opts))
        r = rows[-1]
        print(f"  {r['calls']} calls, {r['rejected_429']} 429s, peak {r['peak_requests']} "
              f"requests / {r['peak_tokens']} tokens, {r['seconds']} s", file=sys.stderr)
    print(table(rows))
    if opts.out:
        opts.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(interruptible(main))  # Ctrl-C or SIGTERM: its services stopped
