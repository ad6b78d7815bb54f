"""Soak: a long drain with faults injected all along, checked by the backend's own counters,
the task store and the memory of the solver and of Redis; on demand, not in CI.

    python -m bench.soak                   # 10,000 prompts, ~10 % faults
    python -m bench.soak --prompts 300     # the quick mode (under a minute)

What runs: the simulator in its own process with ``--fault-rate`` of its accepted calls
failing, a third each: 500s, timeouts (504 after the provider's timeout) and 200s whose
JSON body is cut in half (the provider charged them, the client cannot read them); a
private ``redis-server`` on a free loopback port; quotas kept in a ``QuotaStore``; two
drains of the real ``DrainTrigger``. First one in a child process, SIGKILLed once it has
solved a fifth of the backlog (holding claims and calls in flight); then one in this
process that takes over: it finds the dead drain's live claims, waits for them to lapse
(``CLAIM_TTL_S``) and solves the rest. Once it has solved half of what the kill left,
Redis is restarted without persistence (every key lost; quotas come back from
PostgreSQL).

Checks (each printed PASS/FAIL; any FAIL makes the exit code 1):

- none lost: every task solved or dead-lettered, none pending or claimed;
- none twice: answers the backend completed (readable ones: cut bodies are counted apart)
  - tasks solved <= the answers the kill lost: once the backend is quiet after the kill
  (nothing else calls it then), the answers it completed less the tasks solved: the
  killed drain's answers that were never written. A Redis restart loses none: answers are written
  to the store before they are settled in Redis, so its bound is not added (its own
  figure, taken the same way, is reported);
- no window over target: the simulator's ``violations`` (strict sliding windows) is 0;
- memory flat: RSS of this process and Redis ``used_memory`` at start, middle (three
  quarters of what the kill left solved, after the restart) and end; from middle to end
  neither grows by more than half (plus ``NOISE_MB``).

A JSON summary is printed and written to ``--out`` if given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

import httpx
import psycopg
import redis
from psycopg import sql

from airflow_llm_router.engine import RouterClient, RouterSettings
from airflow_llm_router.quotas import QuotaStore
from airflow_llm_router.store import TaskStore
from airflow_llm_router.triggers import DrainTrigger
from bench.common import guarded
from llm_router_devkit.demo.router_quotas import router_quotas
from llm_router_devkit.redis_tools import PrivateRedis
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.server import SimulatorProcess

DEFAULT_DSN = os.environ.get("LLMR_TEST_POSTGRES_DSN",
                             "postgresql://postgres@127.0.0.1:5432/test")
CLAIM_TTL_S = 5.0
#: How often the store is polled for progress (a count of the table: cheap at this size).
POLL_S = 0.02
#: Growth from the middle sample to the end that counts as a leak.
MAX_GROWTH = 0.5
#: Growth in MB below which a figure is noise, not a leak (after the restart Redis refills
#: its windows from ~1 MB: the quick mode's middle sample can catch it half full).
NOISE_MB = 1.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--prompts", type=int, default=10_000, help="tasks in the backlog")
    parser.add_argument("--time-scale", type=float, default=300.0,
                        help="simulator speed-up (the 60 s window lasts 60/scale s)")
    parser.add_argument("--fault-rate", type=float, default=0.1,
                        help="share of accepted calls that fail, at most 0.5 (a third "
                        "each: 500s, timeouts, truncated JSON)")
    parser.add_argument("--seed", type=int, default=1, help="the simulator's seed")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN,
                        help="a PostgreSQL the soak may create and drop a schema in")
    parser.add_argument("--out", type=Path, help="also write the JSON summary here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def _drain(schema: str, worker_id: str, seconds: float) -> DrainTrigger:
    return DrainTrigger(
        store={"postgres_conn_id": "postgres_default", "schema": schema, "table": "tasks"},
        worker_id=worker_id,
        # no hedging: "none twice" counts every answer beyond one per task as paid twice
        # by a kill, and a hedge is one more call on purpose
        settings={"claim_ttl_s": CLAIM_TTL_S, "claim_batch": 200, "max_in_flight": 200,
                  "backoff_s": 0.05, "max_errors": 10, "progress_every_s": 30,
                  "hedge_late_calls": False},
        router_conn_id="llm_router_default", backend_conn_id="models_backend_default",
        deadline=time.time() + seconds)


async def _run_drain(schema: str, worker_id: str, seconds: float) -> dict[str, Any]:
    event = await anext(_drain(schema, worker_id, seconds).run())
    return dict(event.payload)


def _rss_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def _load_average() -> list[float]:
    """The machine's load average over 1, 5 and 15 minutes: how loaded the run was."""
    return [round(x, 2) for x in os.getloadavg()]


def _used_memory_mb(url: str) -> float:
    with redis.Redis.from_url(url) as client:
        return round(int(client.info("memory")["used_memory"]) / 2**20, 2)


class Soak:
    def __init__(self, opts: argparse.Namespace, stack: ExitStack) -> None:
        self.opts = opts
        self.id = uuid.uuid4().hex[:8]
        self.schema = f"llmr_soak_{self.id}"
        self.namespace = f"soak-{self.id}"
        self.redis = PrivateRedis()
        self.redis.start()
        stack.callback(self.redis.close)
        rate = opts.fault_rate / 3
        self.profile = SimulatorProfile.default(time_scale=opts.time_scale, seed=opts.seed,
                                                error_rate=rate, timeout_rate=rate,
                                                truncate_rate=rate)
        self.sim = stack.enter_context(SimulatorProcess(self.profile))
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
                {"conn_type": "models_backend", "host": self.sim.url,
                 "extra": {"timeout_s": 30}}),
        })
        self.memory: dict[str, dict[str, float]] = {}
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
            for model, quota in router_quotas(self.profile).items():
                quotas.put(model, quota, actor="soak")
        finally:
            router.close()
        batch = 1000
        for start in range(0, self.opts.prompts, batch):
            self.store.enqueue([f"soak prompt {i}: summarise record {i} in one line."
                                for i in range(start, min(start + batch, self.opts.prompts))])

    def sample(self, when: str) -> None:
        self.memory[when] = {"solver_rss_mb": _rss_mb(),
                             "redis_used_memory_mb": _used_memory_mb(self.redis.url)}

    def backend(self) -> dict[str, Any]:
        """The backend's totals, with ``in_flight``: accepted calls still running, and
        ``violations_by_model``: the models whose window it refused a call in, how often."""
        stats = httpx.get(f"{self.sim.url}/stats", timeout=10).json()
        totals = dict(stats["totals"])
        totals["in_flight"] = sum(m["in_flight"] for m in stats["models"].values())
        totals["violations_by_model"] = {
            name: m["violations"]["total"] for name, m in stats["models"].items()
            if m["violations"]["total"]}
        return totals

    def exposed(self) -> dict[str, int]:
        """Answers a crash now could lose: completed or running at the backend, less the
        tasks solved. Solved is read first, so the drains still working can only add to
        the backend's figures: the bound errs high, never low."""
        solved = self.store.counts()["solved"]
        totals = self.backend()
        return {"solved": solved, "completed": totals["completed"],
                "running": totals["in_flight"],
                "in_flight": totals["completed"] + totals["in_flight"] - solved}

    async def run(self) -> None:
        """The killed drain alone until a fifth is solved, then the drain that takes over
        (its claims lapse after ``CLAIM_TTL_S``) with the Redis restart at half."""
        n = self.opts.prompts
        budget = max(120.0, n / 20)
        self.sample("start")
        self.events["load_average"] = {"start": _load_average()}
        started = time.monotonic()
        with tempfile.TemporaryFile() as log:
            victim = subprocess.Popen(
                [sys.executable, "-m", "bench.soak", "--worker", "--postgres-dsn",
                 self.opts.postgres_dsn, "--prompts", str(n)],
                env={**os.environ, "LLMR_SOAK_SCHEMA": self.schema,
                     "LLMR_SOAK_BUDGET": str(budget)},
                stdout=subprocess.DEVNULL, stderr=log, cwd=Path(__file__).resolve().parents[1])
            try:
                await self._kill_mid_run(victim, log, started, budget)
            finally:
                if victim.poll() is None:
                    victim.kill()
                    victim.wait()
        await self._take_over(budget)
        self.events["seconds"] = round(time.monotonic() - started, 1)
        self.events["load_average"]["end"] = _load_average()
        self.sample("end")

    async def _kill_mid_run(self, victim: subprocess.Popen[bytes], log: IO[bytes],
                            started: float, budget: float) -> None:
        """SIGKILL the child's drain once it has solved a fifth and holds claims."""
        n = self.opts.prompts
        deadline = started + budget
        while True:
            await asyncio.sleep(POLL_S)
            counts = await asyncio.to_thread(self.store.counts)
            if counts["solved"] >= n // 5 and counts["claimed"] > 0:
                break
            if victim.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                tail = log.read().decode(errors="replace").strip().splitlines()[-1:] or [""]
                raise RuntimeError(f"the drain to be killed stopped before a fifth was solved "
                                   f"(exit {victim.poll()}, {counts}): {tail[0]}")
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        killed_at = time.monotonic()
        quiet = await self._backend_quiet()
        claimed = (await asyncio.to_thread(self.store.counts))["claimed"]
        self.events["kill"] = {"at_s": round(killed_at - started, 1),
                               "stranded_claims": claimed, "backend_quiet": quiet,
                               "quiet_after_s": round(time.monotonic() - killed_at, 2),
                               **await asyncio.to_thread(self.exposed)}

    async def _backend_quiet(self, settle_s: float = 0.5, limit_s: float = 30.0) -> bool:
        """Wait until the dead drain's calls are over at the backend: none running and no
        new request for ``settle_s`` (a request it wrote just before dying can still sit in
        the backend's socket buffer, and the backend answers it to nobody). Nothing else
        calls the backend meanwhile, so the figures read next are the kill's exactly.

        :return: False if the backend was still busy after ``limit_s`` (the figures then
            still count what runs, so the bound can only err high).
        """
        deadline = time.monotonic() + limit_s
        last, stable_since = None, time.monotonic()
        while time.monotonic() < deadline:
            totals = await asyncio.to_thread(self.backend)
            if totals["requests"] != last or totals["in_flight"]:
                last, stable_since = totals["requests"], time.monotonic()
            elif time.monotonic() - stable_since >= settle_s:
                return True
            await asyncio.sleep(POLL_S)
        return False

    async def _take_over(self, budget: float) -> None:
        """The drain of this process: it finds the dead drain's live claims, takes them
        when they lapse, and rides out the Redis restart, made once it has solved half of
        what the kill left (so while it is solving, whatever the backlog's size)."""
        n = self.opts.prompts
        left_at_kill = n - self.events["kill"]["solved"]
        started = time.monotonic()
        main = asyncio.create_task(_run_drain(self.schema, "soak-main", budget))
        restarted = False
        while not main.done():
            await asyncio.sleep(POLL_S)
            solved = await asyncio.to_thread(lambda: self.store.counts()["solved"])
            if not restarted and n - solved <= left_at_kill // 2:
                self.redis.stop()  # every key gone, as after a crash
                exposed = await asyncio.to_thread(self.exposed)
                await asyncio.sleep(0.5)
                self.redis.start()
                restarted = True
                self.events["redis_restart"] = {
                    "after_take_over_s": round(time.monotonic() - started, 1), **exposed}
            if restarted and "middle" not in self.memory and n - solved <= left_at_kill // 4:
                self.sample("middle")  # in the steady state after the restart
        self.events["drain"] = await main
        self.events["take_over_s"] = round(time.monotonic() - started, 1)

    def checks(self) -> list[tuple[str, bool, str]]:
        n = self.opts.prompts
        counts = self.store.counts()
        totals = self.backend()
        kill = self.events.get("kill", {"in_flight": 0})
        restart = self.events.get("redis_restart", {})
        self.events["repeated"] = totals["completed"] - counts["solved"]
        repeated = self.events["repeated"]
        out = [
            ("none lost", counts["solved"] + counts["dead"] == n
             and counts["pending"] == counts["claimed"] == 0, json.dumps(counts)),
            ("none twice", 0 <= repeated <= kill["in_flight"],
             f"{repeated} answers paid twice; bound {kill['in_flight']}, the answers the kill "
             f"lost; the Redis restart ({restart.get('in_flight', 0)} in flight) added "
             f"{max(0, repeated - kill['in_flight'])}"),
            ("no window over target", totals["violations"] == 0,
             f"violations {totals['violations']} {totals['violations_by_model']}, "
             f"429s {totals['rejected_429']}"),
            ("faults injected", min(totals["errors"], totals["timeouts"],
                                    totals["truncated"]) > 0
             and "kill" in self.events and "redis_restart" in self.events,
             f"{totals['errors']} 5xx, {totals['timeouts']} timeouts, {totals['truncated']} "
             f"truncated JSON, one kill, one restart"),
        ]
        if "middle" in self.memory:
            for key in ("solver_rss_mb", "redis_used_memory_mb"):
                mid, end = self.memory["middle"][key], self.memory["end"][key]
                out.append((f"{key} flat", end <= mid * (1 + MAX_GROWTH) + NOISE_MB,
                            f"start {self.memory['start'][key]}, middle {mid}, end {end}"))
        self.events["backend"] = totals
        self.events["counts"] = counts
        return out


def _worker(opts: argparse.Namespace) -> int:
    """The drain that gets killed (a child process sharing the environment)."""
    schema = os.environ["LLMR_SOAK_SCHEMA"]
    asyncio.run(_run_drain(schema, "soak-victim", float(os.environ["LLMR_SOAK_BUDGET"])))
    return 0


def _bad_options(opts: argparse.Namespace) -> str | None:
    """What is wrong with the options, checked before anything starts, or None."""
    if opts.prompts < 10 or opts.time_scale <= 0 or not 0 <= opts.fault_rate <= 0.5:
        return "--prompts must be >= 10, --time-scale > 0 and --fault-rate in [0, 0.5]"
    if opts.out is not None and not opts.out.parent.is_dir():
        return f"--out {opts.out}: no directory {opts.out.parent}; create it or pick another"
    return None


def _soak(opts: argparse.Namespace) -> tuple[Soak, list[tuple[str, bool, str]]]:
    """Run the soak; every service it started is stopped and its schema dropped on return."""
    with ExitStack() as stack:
        soak = Soak(opts, stack)
        soak.seed()
        asyncio.run(soak.run())
        return soak, soak.checks()


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if opts.worker:
        return _worker(opts)
    problem = _bad_options(opts)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    done: list[tuple[Soak, list[tuple[str, bool, str]]]] = []

    def run() -> int:
        done.append(_soak(opts))
        return 0

    status = guarded(run)  # one error line (clean-up's too), never a traceback
    if status:
        return status
    soak, results = done[0]
    for name, ok, detail in results:
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    summary = {"prompts": opts.prompts, "time_scale": opts.time_scale,
               "fault_rate": opts.fault_rate, "memory": soak.memory, **soak.events,
               "checks": {name: ok for name, ok, _ in results}}
    print(json.dumps(summary))
    if opts.out:
        opts.out.write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
