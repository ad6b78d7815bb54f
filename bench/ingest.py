"""Task ingestion over HTTP beside a running drain; on demand, not in CI.

    python -m bench.ingest                 # four runs, ~4 minutes
    python -m bench.ingest --write         # and rewrite its section of bench/out/benchmarks.md

Parts, each real: the standalone HTTP API (``python -m airflow_llm_router.web``, its own
process, bearer token and connections from ``AIRFLOW_CONN_*``), a private ``redis-server``,
the devkit's simulator in its own process, a fresh PostgreSQL schema, and one
``DrainTrigger`` run in this process that lingers on the store's notifications (so posted
tasks are its only work). Producers are plain ``httpx`` clients, as a caller outside
Airflow would be. The simulator's models think for a fixed time (no spread, no tail) and
are bound by their concurrency. Between the drain and the simulator a recording proxy (a
thread of this process) notes when each prompt reaches the backend.

1. **Ingestion**: ``--producers`` clients POST ``--tasks`` tasks in batches of ``--batch``
   (each task with an idempotency key) while the drain runs; then one batch is POSTed again,
   as a producer retrying a lost answer would. Reported: POST latency, the time from the
   first POST to the last answer, the retried batch's answer (duplicates, nothing created).
2. **Hot behind bulk**: ``--bulk`` bulk tasks are POSTed at once; once the drain is
   saturated, ``--hot`` hot tasks are POSTed one at a time at random intervals. For each:
   time from its POST (the row's ``created_at``) to the drain's claim (polled every 10 ms)
   and to its call reaching the backend (the proxy's record), and how many bulk calls
   reached the backend in that time; for contrast, the bulk tasks' time from POST to call.

Both run with each ``--in-flight`` value (the drain's ``max_in_flight``: how many claimed
tasks it holds, in flight or waiting for admission), ``--runs`` times each. Also reported:
the backend's own 429s and limit violations (zero means the router kept every model under
its limits while the API fed it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import uvicorn
from psycopg import sql
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from airflow_llm_router.engine import RouterClient, RouterSettings
from airflow_llm_router.store import TaskStore
from bench.common import (
    BENCHMARKS_MD,
    add_run_options,
    drain_once,
    interruptible,
    private_services,
    publish,
)
from llm_router_devkit.api_server import api_env, standalone_api
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.profile import ModelProfile

HEADING = "## Ingestion over HTTP"
OUT = BENCHMARKS_MD
TOKEN_CONN = "bench_ingest_api"
FLUSH_S = 0.05
POLL_S = 0.05


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: give integers separated by commas") \
            from err
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be at least 1")
    return values


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1000, help="tasks POSTed in phase 1")
    parser.add_argument("--batch", type=int, default=50, help="tasks per POST in phase 1")
    parser.add_argument("--producers", type=int, default=4, help="concurrent producers")
    parser.add_argument("--bulk", type=int, default=800, help="bulk backlog of phase 2")
    parser.add_argument("--hot", type=int, default=20, help="hot tasks POSTed in phase 2")
    parser.add_argument("--models", type=int, default=4, help="models, any allowed")
    parser.add_argument("--concurrency", type=int, default=8, help="each model's limit")
    parser.add_argument("--latency", type=float, default=0.5,
                        help="each call's fixed latency (wall-clock seconds)")
    parser.add_argument("--in-flight", type=_ints, default=[100, 40],
                        help="the drain's max_in_flight (claimed tasks it holds): each value "
                        "is run --runs times")
    parser.add_argument("--runs", type=int, default=2,
                        help="runs per --in-flight value, each from scratch")
    add_run_options(parser, heading=HEADING)
    parser.add_argument("--replay", type=Path, help="run nothing: report the runs of an "
                        "earlier --out file (with the options they were run with)")
    return parser


TIME_SCALE = 60.0  # the provider's 60 s window lasts 1 s


def _profile(opts: argparse.Namespace) -> SimulatorProfile:
    provider_latency = opts.latency * TIME_SCALE
    models = [ModelProfile(name=f"m{i}", median_s=provider_latency, sigma=0.0,
                           min_s=provider_latency, max_s=provider_latency, tail_rate=0.0,
                           token_elasticity=0.0, output_tokens_mean=50,
                           max_concurrency=opts.concurrency)
              for i in range(opts.models)]
    return SimulatorProfile(time_scale=TIME_SCALE, seed=opts.seed, models=models)


class Recorder:
    """A pass-through proxy in front of the simulator that notes when each prompt first
    arrives (``time.time()``, the clock PostgreSQL's ``now()`` also reads here)."""

    _KEEP = ("content-type", "retry-after", "retry-after-ms")

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.arrivals: dict[str, float] = {}
        self._client: httpx.AsyncClient | None = None
        app = Starlette(routes=[Route("/{path:path}", self._forward, methods=["GET", "POST"])])
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning",
                                                     lifespan="off"))
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._sock]}, daemon=True)

    async def _forward(self, request: Request) -> Response:
        body = await request.body()
        now = time.time()
        if request.method == "POST" and body:
            data = json.loads(body)
            for item in data.get("items", [data]):
                self.arrivals.setdefault(str(item.get("prompt")), now)
        if self._client is None:
            self._client = httpx.AsyncClient(base_url=self.upstream, timeout=120,
                                             limits=httpx.Limits(max_connections=None))
        answer = await self._client.request(
            request.method, request.url.path, content=body,
            headers={"content-type": request.headers.get("content-type", "")})
        return Response(answer.content, status_code=answer.status_code,
                        headers={k: v for k, v in answer.headers.items() if k in self._KEEP})

    def __enter__(self) -> Recorder:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the recording proxy did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *_: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


class Bench:
    def __init__(self, opts: argparse.Namespace, api: str, token: str, store: TaskStore,
                 schema: str, recorder: Recorder) -> None:
        self.opts = opts
        self.recorder = recorder
        self.api = api
        self.headers = {"Authorization": f"Bearer {token}"}
        self.store = store
        self.schema = schema
        self.rng = random.Random(opts.seed)

    async def _post(self, client: httpx.AsyncClient, tasks: list[dict[str, Any]]
                    ) -> tuple[dict[str, Any], float]:
        started = time.perf_counter()
        response = await client.post("/tasks", json={"tasks": tasks})
        took = time.perf_counter() - started
        if response.status_code not in (200, 201):
            raise RuntimeError(f"POST /tasks answered {response.status_code}: {response.text}")
        return response.json(), took

    async def _until_solved(self, total: int, deadline_s: float) -> float:
        started = time.monotonic()
        while time.monotonic() - started < deadline_s:
            counts = await asyncio.to_thread(self.store.counts)
            if counts["solved"] + counts["dead"] >= total:
                return time.monotonic() - started
            await asyncio.sleep(POLL_S)
        raise RuntimeError(f"not all {total} tasks were answered in {deadline_s} s")

    async def ingestion(self, client: httpx.AsyncClient) -> dict[str, Any]:
        n, size = self.opts.tasks, self.opts.batch
        batches = [[{"prompt": f"ingest {i}: summarise record {i}",
                     "idempotency_key": f"ingest-{i}"} for i in range(s, min(n, s + size))]
                   for s in range(0, n, size)]
        latencies: list[float] = []
        queue = list(batches)

        async def producer() -> None:
            while queue:
                _, took = await self._post(client, queue.pop())
                latencies.append(took)

        started = time.monotonic()
        await asyncio.gather(*(producer() for _ in range(self.opts.producers)))
        posted = time.monotonic() - started
        retried, _ = await self._post(client, batches[0])
        answered = posted + await self._until_solved(n, 300)
        counts = await asyncio.to_thread(self.store.counts)
        return {"tasks": n, "posts": len(batches), "post_p50_ms": round(
            1000 * statistics.median(latencies), 1), "post_p95_ms": round(
            1000 * _pct(latencies, 95), 1), "all_posted_s": round(posted, 2),
            "all_answered_s": round(answered, 2), "answers_per_s": round(n / answered, 1),
            "solved": counts["solved"], "dead": counts["dead"],
            "retry_created": retried["created"], "retry_duplicates": sum(retried["duplicates"])}

    async def hot_behind_bulk(self, client: httpx.AsyncClient) -> dict[str, Any]:
        before = (await asyncio.to_thread(self.store.counts))["solved"]
        bulk = [{"prompt": f"bulk {i}: translate record {i}"} for i in range(self.opts.bulk)]
        bulk_ids: list[int] = []
        for s in range(0, len(bulk), 200):
            answer, _ = await self._post(client, bulk[s:s + 200])
            bulk_ids += answer["ids"]
        while (await asyncio.to_thread(self.store.counts))["solved"] < before + 50:
            await asyncio.sleep(POLL_S)  # the drain is saturated: its claims are full
        hot_ids: list[int] = []
        waiting_at_post: list[int] = []
        claimed_at: dict[int, float] = {}
        stop = asyncio.Event()
        watcher = asyncio.create_task(self._watch_claims(hot_ids, claimed_at, stop))
        for i in range(self.opts.hot):
            counts = await asyncio.to_thread(self.store.counts)
            waiting_at_post.append(counts["pending"] + counts["claimed"])
            answer, _ = await self._post(client, [{"prompt": f"hot {i}: answer now",
                                                   "priority": "hot"}])
            hot_ids += answer["ids"]
            await asyncio.sleep(self.rng.uniform(0.2, 0.6))
        await self._until_solved(before + self.opts.bulk + self.opts.hot, 300)
        stop.set()
        await watcher
        return self._hot_figures(bulk_ids, hot_ids, waiting_at_post, claimed_at)

    async def _watch_claims(self, ids: list[int], claimed_at: dict[int, float],
                            stop: asyncio.Event) -> None:
        """When each hot task left pending (the drain claimed it), by the database's clock,
        polled every 10 ms (one indexed query for all of them)."""
        query = sql.SQL("SELECT id, extract(epoch FROM clock_timestamp())::float8 FROM {} "
                        "WHERE id = ANY(%s) AND status <> 'pending'").format(
            sql.Identifier(self.schema, "tasks"))
        async with await psycopg.AsyncConnection.connect(self.opts.postgres_dsn,
                                                         autocommit=True) as conn:
            while not stop.is_set():
                waiting = [i for i in ids if i not in claimed_at]
                if waiting:
                    for task_id, at in await (await conn.execute(query, (waiting,))).fetchall():
                        claimed_at.setdefault(task_id, at)
                with suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.01)

    def _times(self, ids: list[int]) -> dict[int, tuple[float, float]]:
        """(POSTed, reached the backend) per task, epoch seconds."""
        query = sql.SQL("SELECT id, created_at, prompt FROM {} WHERE id = ANY(%s)").format(
            sql.Identifier(self.schema, "tasks"))
        with psycopg.connect(self.opts.postgres_dsn) as conn:
            rows: list[tuple[int, datetime, str]] = conn.execute(query, (ids,)).fetchall()
        return {i: (created.timestamp(), self.recorder.arrivals[prompt])
                for i, created, prompt in rows}

    def _hot_figures(self, bulk_ids: list[int], hot_ids: list[int],
                     waiting_at_post: list[int], claimed_at: dict[int, float]
                     ) -> dict[str, Any]:
        latency = self.opts.latency
        bulk = self._times(bulk_ids)
        hot = self._times(hot_ids)
        bulk_sent = sorted(sent for _, sent in bulk.values())
        hot_wait, ahead, to_claim, after_claim = [], [], [], []
        for task_id, (posted, sent) in hot.items():
            claimed = claimed_at.get(task_id, sent)
            hot_wait.append(sent - posted)
            ahead.append(sum(posted < b < sent for b in bulk_sent))
            to_claim.append(claimed - posted)
            after_claim.append(sum(claimed < b < sent for b in bulk_sent))
        bulk_wait = [sent - posted for posted, sent in bulk.values()]
        slots = self.opts.models * self.opts.concurrency
        return {
            "bulk": len(bulk_ids), "hot": len(hot_ids),
            "waiting_at_hot_post_median": statistics.median(waiting_at_post),
            "hot_to_backend_p50_s": round(statistics.median(hot_wait), 3),
            "hot_to_backend_p95_s": round(_pct(hot_wait, 95), 3),
            "hot_to_backend_max_s": round(max(hot_wait), 3),
            "hot_to_claim_p50_s": round(statistics.median(to_claim), 3),
            "hot_to_claim_p95_s": round(_pct(to_claim, 95), 3),
            "hot_waits_s": [round(w, 3) for w in hot_wait],
            "hot_to_claim_s": [round(w, 3) for w in to_claim],
            "bulk_calls_ahead": ahead,
            "bulk_calls_after_claim": after_claim,
            "bulk_calls_after_claim_p50": statistics.median(after_claim),
            "bulk_calls_after_claim_p95": _pct(after_claim, 95),
            "bulk_calls_ahead_p50": statistics.median(ahead),
            "bulk_calls_ahead_p95": _pct(ahead, 95),
            "bulk_to_backend_p50_s": round(statistics.median(bulk_wait), 2),
            "bulk_to_backend_p95_s": round(_pct(bulk_wait, 95), 2),
            "completion_gap_s": round(latency / slots, 4),
        }


def run(opts: argparse.Namespace, in_flight: int) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    schema, namespace = f"llmr_ingest_{run_id}", f"ingest-{run_id}"
    prof = _profile(opts)
    token = secrets.token_urlsafe(24)
    with ExitStack() as stack:
        redis_server, sim, store = private_services(stack, opts.postgres_dsn, schema, prof)
        recorder = stack.enter_context(Recorder(sim.url))
        store.migrate()
        conns: dict[str, dict[str, object] | str] = {
            "llm_router_default": {
                "conn_type": "llm_router", "host": "127.0.0.1", "port": redis_server.port,
                "extra": {"namespace": namespace, "lease_ttl_s": 30}},
            "postgres_default": opts.postgres_dsn,
            "models_backend_default": {"conn_type": "models_backend", "host": recorder.url,
                                       "extra": {"timeout_s": 60}},
            TOKEN_CONN: {"conn_type": "generic", "password": token},
        }
        os.environ.update({f"AIRFLOW_CONN_{k.upper()}": v if isinstance(v, str)
                           else json.dumps(v) for k, v in conns.items()})
        router = RouterClient.from_url(redis_server.url, RouterSettings(namespace=namespace))
        stack.callback(router.close)
        for model in prof.models:
            router.set_quota(model.name, {"rpm": 100_000, "tpm": 100_000_000,
                                          "max_concurrency": opts.concurrency,
                                          "window_s": prof.scaled_window_s,
                                          "expected_output_tokens": 50})
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llmr-ingest-")))
        api = stack.enter_context(standalone_api(
            api_env(home, conns), ["--token-conn-id", TOKEN_CONN, "--conn-id",
                                   "llm_router_default", "--postgres-conn-id",
                                   "postgres_default", "--store-schema", schema],
            home / "api.log"))
        bench = Bench(opts, api, token, store, schema, recorder)

        async def go() -> dict[str, Any]:
            drain = asyncio.create_task(_drain(schema, in_flight))
            try:
                async with httpx.AsyncClient(base_url=api, headers=bench.headers,
                                             timeout=60) as client:
                    first = await bench.ingestion(client)
                    second = await bench.hot_behind_bulk(client)
            finally:
                drain.cancel()
                with suppress(asyncio.CancelledError):
                    await drain
            return {"ingestion": first, "hot_behind_bulk": second}

        results = asyncio.run(go())
        served = httpx.get(f"{sim.url}/stats", timeout=10).json()
    totals = served["totals"]
    results["in_flight"] = in_flight
    results["backend"] = {"rejected_429": totals["rejected_429"],
                          "violations": totals["violations"],
                          "peak_concurrency": {m: s.get("peak_concurrency")
                                               for m, s in served["models"].items()}}
    return results


async def _drain(schema: str, in_flight: int) -> dict[str, Any]:
    return await drain_once(schema, f"ingest-{schema}", timeout_s=1800, claim_ttl_s=30,
                            claim_batch=50, max_in_flight=in_flight, linger_s=3600,
                            flush_every_s=FLUSH_S)


def report(opts: argparse.Namespace, runs: list[dict[str, Any]]) -> str:
    slots = opts.models * opts.concurrency
    lines = [
        HEADING, "",
        f"`python -m bench.ingest --runs {opts.runs} --in-flight "
        f"{','.join(map(str, opts.in_flight))}` (run "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, seed {opts.seed}, on the "
        "shared 2-core machine): the standalone HTTP API in its own process, plain `httpx` "
        "producers, one `DrainTrigger` lingering on the store's notifications, the simulator "
        f"with {opts.models} models of {opts.concurrency} concurrent calls each ({slots} "
        f"slots), every call {opts.latency:g} s (so at most {slots / opts.latency:g} "
        "answers/s); the drain holds up to `max_in_flight` claimed tasks (its slots: "
        "calls in flight and claimed tasks waiting for admission). A recording proxy notes "
        "when each prompt reaches the backend.", "",
        f"**Ingestion**: {opts.tasks} tasks POSTed by {opts.producers} producers in POSTs of "
        f"{opts.batch} (each task with an idempotency key) while the drain ran, then the first "
        "POST sent again (a retry after a lost answer).", "",
        "| run | max_in_flight | POST p50 / p95 | all posted | all answered (from the first "
        "POST) | answers/s | solved / dead | the retried POST: duplicates / created |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in enumerate(runs, 1):
        a = r["ingestion"]
        lines.append(
            f"| {n} | {r.get('in_flight', 100)} | {a['post_p50_ms']} / {a['post_p95_ms']} ms "
            f"| {a['all_posted_s']} s | "
            f"{a['all_answered_s']} s | {a['answers_per_s']} | {a['solved']} / {a['dead']} | "
            f"{a['retry_duplicates']} / {a['retry_created']} |")
    lines += [
        "", f"**Hot behind bulk**: {opts.bulk} bulk tasks POSTed at once; once the drain was "
        f"busy, {opts.hot} hot tasks POSTed one at a time, 0.2-0.6 s apart, each behind ~500 "
        "waiting tasks. Times from the POST (the row's `created_at`); bulk calls counted "
        "when they reached the backend in that time.", "",
        "| run | max_in_flight | hot: POST to call, p50 / p95 / max | hot: POST to claim, "
        "p50 / p95 | bulk calls first, p50 / p95 | of those after the claim, p50 / p95 | "
        "bulk: POST to call, p50 / p95 | backend 429s / violations |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in enumerate(runs, 1):
        h, b = r["hot_behind_bulk"], r["backend"]
        lines.append(
            f"| {n} | {r.get('in_flight', 100)} | {h['hot_to_backend_p50_s']} / "
            f"{h['hot_to_backend_p95_s']} / "
            f"{h['hot_to_backend_max_s']} s | {h['hot_to_claim_p50_s']} / "
            f"{h['hot_to_claim_p95_s']} s | {h['bulk_calls_ahead_p50']:g} / "
            f"{h['bulk_calls_ahead_p95']:g} | {h['bulk_calls_after_claim_p50']:g} / "
            f"{h['bulk_calls_after_claim_p95']:g} | {h['bulk_to_backend_p50_s']} / "
            f"{h['bulk_to_backend_p95_s']} s | {b['rejected_429']} / {b['violations']} |")
    lines += [
        "", "A hot task reaches the backend within about one call's latency of its POST, "
        "while the bulk backlog it jumped waits seconds. Most of that time is the drain "
        "claiming it: a drain claims again only once 10 of its slots are free "
        "(`solver/drain.py`), and the bulk tasks it already claimed keep going first; once "
        "claimed, the hot task takes one of the next freed slots (few bulk calls after the "
        "claim). A drain that holds few more claims than the models have slots "
        "(`max_in_flight` near the sum of their concurrency) claims the hot task sooner. "
        "With every call the same length the slots free in waves, so the next free slot "
        "can be most of a call away. Timings move with the machine's load (other runs share "
        "its 2 cores): compare the hot and bulk columns within a run."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    runs = json.loads(opts.replay.read_text()) if opts.replay else []
    for in_flight in [] if opts.replay else opts.in_flight:
        for _ in range(opts.runs):
            runs.append(run(opts, in_flight))
            print(f"run {len(runs)}: " + json.dumps(runs[-1]))
    if opts.out:
        opts.out.write_text(json.dumps(runs, indent=2))
    publish(report(opts, runs), HEADING, OUT, opts.write)
    return 0


if __name__ == "__main__":
    sys.exit(interruptible(main))  # Ctrl-C or SIGTERM: its services stopped
