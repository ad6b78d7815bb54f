"""Callers outside Airflow sharing the quotas through the HTTP API, beside a running drain;
on demand, not in CI.

    python -m bench.http_admission           # ~1 minute
    python -m bench.http_admission --write   # and rewrite its section of bench/out/benchmarks.md

Parts, each real and each in its own process but the drain: the standalone HTTP API
(``python -m airflow_llm_router.web``, bearer token and connections from ``AIRFLOW_CONN_*``),
a private ``redis-server``, the devkit's simulator (strict: it refuses with 429 whatever
would take a window over the limit) and a fresh PostgreSQL schema drained by one
``DrainTrigger`` run in this process. Both kinds of caller reserve input + the simulator's
longest answer and send that as ``max_output_tokens``, so the reservation is exact.

1. **Shared quotas**: ``--clients`` plain ``httpx`` clients each loop ``POST /schedule`` (on
   a wait, sleep ``wait_ms`` and ask again with the same ``request_id``) -> ``POST /single``
   on the simulator -> ``POST /complete`` with the backend's usage (or ``rate_limited`` and
   its Retry-After on a 429), for ``--calls`` calls in all, while the drain solves
   ``--backlog`` tasks on the same models. Reported from the backend's own counters: its
   peak requests and tokens offered in any window and its peak concurrency against each
   target (over target = a window the router let go over), its 429s; the admissions per
   second over HTTP and the drain's; ``/schedule`` latency.
   **Spend within budget**: ``fast`` is priced (``PRICES``) with a spend budget of
   ``--budget`` micro-dollars for the day, less than the run would cost on it: admission
   reserves each call's cost and settles the actual, and once the budget is spent both kinds
   of caller go on to ``slow``. Reported: the engine's settled spend, the cost of what the
   backend itself accepted on ``fast`` at those prices (an independent sum), the budget.
2. **The API's own rate**: the same clients ``/schedule`` -> ``/complete`` with no backend
   call on roomy quotas, for ``--raw-seconds``: admissions per second the API sustains.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from airflow_llm_router.engine import RouterClient, RouterSettings
from bench.common import (
    BENCHMARKS_MD,
    add_run_options,
    drain_once,
    guarded,
    private_services,
    publish,
)
from llm_router_devkit.api_server import api_env, standalone_api
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.profile import ModelProfile

HEADING = "## Admission over HTTP beside a drain"
OUT = BENCHMARKS_MD
TOKEN_CONN = "bench_http_api"
MAX_OUTPUT = 600
#: ``fast``'s prices, micro-dollars per million input / output tokens ($1 / $4)
PRICES = (1_000_000, 4_000_000)
#: name -> (rpm, tpm, max_concurrency, median latency s) per provider minute
MODELS = {"fast": (240, 120_000, 24, 3.0), "slow": (120, 60_000, 12, 6.0)}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.http_admission",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--clients", type=int, default=32, help="HTTP callers")
    parser.add_argument("--calls", type=int, default=1200, help="calls the HTTP callers make")
    parser.add_argument("--backlog", type=int, default=1200, help="tasks the drain solves")
    parser.add_argument("--raw-seconds", type=float, default=10.0,
                        help="length of the API-only phase")
    parser.add_argument("--runs", default="50,50+hop,250",
                        help="one run each: the router's guard_ms, '+hop' when the callers "
                        "report their HTTP hop to /complete (arrival_delay_s)")
    parser.add_argument("--http-hop-ms", type=int, default=RouterSettings().http_hop_ms,
                        help="the API's allowance for its callers' hop (the router "
                        "connection's http_hop_ms; 0: none)")
    parser.add_argument("--budget", type=int, default=400_000,
                        help="fast's spend budget for the day, micro-dollars (0: no price)")
    add_run_options(parser, heading=HEADING, time_scale=30.0)
    return parser


def profile(opts: argparse.Namespace) -> SimulatorProfile:
    models = [ModelProfile(name=name, median_s=lat, sigma=0.4, min_s=lat / 3, max_s=lat * 4,
                           output_tokens_mean=250, output_tokens_max=MAX_OUTPUT, rpm=rpm,
                           tpm=tpm, max_concurrency=conc)
              for name, (rpm, tpm, conc, lat) in MODELS.items()]
    return SimulatorProfile(time_scale=opts.time_scale, seed=opts.seed, models=models)


@dataclass
class Tally:
    """What the HTTP callers saw."""

    admitted: int = 0
    waits: int = 0
    backend_429: int = 0
    backend_errors: int = 0
    schedule_ms: list[float] = field(default_factory=list)
    first_admit: float = 0.0
    last_complete: float = 0.0


async def _post(api: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Any:
    """POST to the API, sent again on a dropped connection (a keep-alive connection the
    server closed as it was reused, on a busy machine): ``/schedule`` with its
    ``request_id`` and ``/complete`` are both safe to repeat."""
    for attempt in range(4):
        try:
            return (await api.post(path, json=body)).raise_for_status().json()
        except httpx.TransportError:
            if attempt == 3:
                raise
            await asyncio.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


async def _call(api: httpx.AsyncClient, sim: httpx.AsyncClient, prompt: str,
                tally: Tally, backend: bool, hop: bool) -> None:
    """One call the way an outside caller makes it: schedule (waiting as told), call, settle;
    with ``hop``, tell ``/complete`` how long after the admitting ``/schedule`` was sent the
    backend received the call (its ``x-received-ms``)."""
    request_id = uuid.uuid4().hex
    body = {"estimated_tokens": max(1, len(prompt) // 4) + MAX_OUTPUT,
            "request_id": request_id}
    while True:
        asked_at = time.time()
        started = time.perf_counter()
        answer = await _post(api, "/schedule", body)
        tally.schedule_ms.append((time.perf_counter() - started) * 1000)
        if answer["status"] == "admitted":
            break
        tally.waits += 1
        await asyncio.sleep(answer["wait_ms"] / 1000)
    tally.admitted += 1
    tally.first_admit = tally.first_admit or time.monotonic()
    done: dict[str, Any] = {"lease_id": answer["lease_id"]}
    if backend:
        try:
            reply = await sim.post("/single", json={"model": answer["model"],
                                                    "prompt": prompt,
                                                    "max_output_tokens": MAX_OUTPUT})
        except httpx.TransportError:  # the backend may have served it: not sent again
            reply = httpx.Response(599)
        if reply.status_code == 429:
            tally.backend_429 += 1
            done |= {"outcome": "rate_limited",
                     "retry_after_s": reply.json().get("retry_after_s")}
        elif reply.status_code == 200:
            done["usage"] = reply.json()["usage"]
        else:
            tally.backend_errors += 1
            done["outcome"] = "error"
        received = reply.headers.get("x-received-ms")
        if hop and received:
            done["arrival_delay_s"] = max(0.0, float(received) / 1000 - asked_at)
    await _post(api, "/complete", done)
    tally.last_complete = time.monotonic()


async def _callers(api_url: str, token: str, sim_url: str, clients: int, calls: int,
                   until: float | None = None, hop: bool = True) -> Tally:
    """``clients`` callers making ``calls`` calls (backend calls), or admissions only until
    ``until`` (monotonic) when given."""
    tally = Tally()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=api_url, headers=headers, limits=limits,
                                 timeout=60) as api, \
            httpx.AsyncClient(base_url=sim_url, limits=limits, timeout=120) as sim:
        left = iter(range(calls))

        async def caller(n: int) -> None:
            for i in left:
                if until is not None and time.monotonic() > until:
                    return
                await _call(api, sim, f"outside caller {n} question {i}", tally,
                            backend=until is None, hop=hop)

        await asyncio.gather(*(caller(n) for n in range(clients)))
    return tally


async def _drain(schema: str, run_id: str) -> dict[str, Any]:
    return await drain_once(schema, f"http-bench-{run_id}", timeout_s=900, claim_ttl_s=60,
                            claim_batch=200, max_in_flight=200)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1) if ordered else 0.0


def run(opts: argparse.Namespace, guard_ms: int, raw_seconds: float,
        hop: bool = True) -> dict[str, Any]:
    """One run with this guard: the shared phase, then (``raw_seconds`` > 0) the API-only
    phase."""
    run_id = uuid.uuid4().hex[:8]
    schema, namespace, token = f"llmr_http_{run_id}", f"http-{run_id}", secrets.token_urlsafe(24)
    prof = profile(opts)
    with ExitStack() as stack:
        redis_server, sim, store = private_services(stack, opts.postgres_dsn, schema, prof)
        store.migrate()
        store.enqueue([f"backlog task {i}" for i in range(opts.backlog)])
        connections: dict[str, dict[str, object] | str] = {
            "llm_router_default": {"conn_type": "llm_router", "host": "127.0.0.1",
                                   "port": redis_server.port,
                                   # quotas are set in Redis here, with no quota store
                                   "extra": {"namespace": namespace, "lease_ttl_s": 60,
                                             "guard_ms": guard_ms,
                                             "http_hop_ms": opts.http_hop_ms,
                                             "restore_quotas": False}},
            "postgres_default": opts.postgres_dsn,
            "models_backend_default": {"conn_type": "models_backend", "host": sim.url,
                                       "extra": {"timeout_s": 60,
                                                 "max_output_tokens": MAX_OUTPUT}},
            TOKEN_CONN: {"conn_type": "generic", "password": token}}
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llmr-http-")))
        env = api_env(home, connections)
        conns = {k: v for k, v in env.items() if k.startswith("AIRFLOW_CONN_")}
        saved = {k: os.environ.get(k) for k in conns}
        stack.callback(_restore_env, saved)
        os.environ.update(conns)  # the drain in this process reads the same connections
        # the settings the API and the drain use (the stats' guard is computed with them)
        router = RouterClient.from_url(redis_server.url, RouterSettings(
            namespace=namespace, lease_ttl_s=60, guard_ms=guard_ms))
        stack.callback(router.close)
        for name, (rpm, tpm, conc, _) in MODELS.items():
            priced = ({"input_micro_usd_per_mtok": PRICES[0],
                       "output_micro_usd_per_mtok": PRICES[1],
                       "budget_micro_usd": opts.budget, "budget_period_s": 86_400}
                      if name == "fast" and opts.budget else {})
            router.set_quota(name, {"rpm": rpm, "tpm": tpm, "max_concurrency": conc,
                                    "window_s": prof.scaled_window_s, **priced})
        api_url = stack.enter_context(standalone_api(
            env, ["--token-conn-id", TOKEN_CONN], home / "api.log"))

        async def shared() -> tuple[Tally, dict[str, Any], float, float]:
            started = time.monotonic()

            async def drain() -> tuple[dict[str, Any], float]:
                event = await _drain(schema, run_id)
                return event, time.monotonic() - started

            draining = asyncio.create_task(drain())
            tally = await _callers(api_url, token, sim.url, opts.clients, opts.calls,
                                   hop=hop)
            http_done = time.monotonic() - started
            event, drain_s = await draining
            return tally, event, http_done, drain_s

        tally, event, http_s, drain_s = asyncio.run(shared())
        served = httpx.get(f"{sim.url}/stats", timeout=10).json()
        engine = router.stats()
        solved = store.counts().get("solved", 0)
        for name in MODELS:  # roomy quotas (and no budget) for the API-only phase
            router.set_quota(name, {"rpm": 10**7, "tpm": 10**9, "max_concurrency": 10**6,
                                    "window_s": prof.scaled_window_s})
        raw_started = time.monotonic()
        raw = asyncio.run(_callers(api_url, token, sim.url, opts.clients, 10**9,
                                   until=raw_started + raw_seconds))
        raw_s = max(time.monotonic() - raw_started, 1e-9)
    result = _result(opts, prof, tally, event, served, engine.models, solved, http_s, drain_s,
                     raw, raw_s)
    return {"guard_ms": guard_ms, "hop_reported": hop, "http_hop_ms": opts.http_hop_ms,
            **result}


def _result(opts: argparse.Namespace, prof: SimulatorProfile, tally: Tally,
            event: dict[str, Any], served: dict[str, Any], engine: dict[str, Any],
            solved: int, http_s: float, drain_s: float, raw: Tally,
            raw_s: float) -> dict[str, Any]:
    models = {}
    for name, (rpm, tpm, conc, _) in MODELS.items():
        m = served["models"][name]
        models[name] = {
            "targets": {"rpm": rpm, "tpm": tpm, "max_concurrency": conc},
            "peak_requests_in_window": m["peak_offered_requests_in_window"],
            "peak_tokens_in_window": m["peak_offered_tokens_in_window"],
            "peak_concurrency": m["peak_concurrency"],
            "accepted": m["accepted"], "rejected_429": m["rejected_429"],
            "over_target": (m["peak_offered_requests_in_window"] > rpm
                            or m["peak_offered_tokens_in_window"] > tpm
                            or m["peak_concurrency"] > conc),
            "engine_counters": engine[name].counters,
            "guard_ms_at_end": engine[name].guard_ms,
        }
        spend = engine[name].spend
        if spend is not None:
            backend_cost = (m["input_tokens_accepted"] * PRICES[0]
                            + m["output_tokens_accepted"] * PRICES[1]) / 1e6
            models[name]["spend"] = {
                "budget_micro_usd": spend.budget_micro_usd,
                "settled_micro_usd": spend.settled_micro_usd,
                "reserved_micro_usd": spend.reserved_micro_usd,
                "backend_cost_micro_usd": round(backend_cost),
                "within_budget": (spend.budget_micro_usd is None
                                  or max(spend.settled_micro_usd, backend_cost)
                                  <= spend.budget_micro_usd)}
    capacity = sum(rpm for rpm, *_ in MODELS.values()) / prof.scaled_window_s
    return {
        "time_scale": opts.time_scale, "window_s": prof.scaled_window_s,
        "clients": opts.clients, "calls": opts.calls, "backlog": opts.backlog,
        "drain_status": event.get("status"), "drain_solved": solved,
        # late calls the drain sent to a second model too (each one call more)
        "drain_hedged": (event.get("summary") or {}).get("hedged", 0),
        "http_admitted": tally.admitted, "http_waits": tally.waits,
        "http_backend_429": tally.backend_429, "http_backend_errors": tally.backend_errors,
        "http_s": round(http_s, 2),
        "drain_s": round(drain_s, 2), "total_s": round(max(http_s, drain_s), 2),
        "http_admissions_per_s": round(tally.admitted / http_s, 1),
        "drain_admissions_per_s": round(solved / drain_s, 1),
        "all_admissions_per_s": round((tally.admitted + solved) / max(http_s, drain_s), 1),
        "rpm_capacity_per_s": round(capacity, 1),
        "schedule_ms_p50": _percentile(tally.schedule_ms, 0.5),
        "schedule_ms_p95": _percentile(tally.schedule_ms, 0.95),
        "backend_429": served["totals"]["rejected_429"],
        "models": models,
        "raw_admissions_per_s": round(raw.admitted / raw_s, 1) if raw.admitted else None,
        "raw_schedule_ms_p50": _percentile(raw.schedule_ms, 0.5),
        "raw_schedule_ms_p95": _percentile(raw.schedule_ms, 0.95),
    }


def _restore_env(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def report(opts: argparse.Namespace, runs: list[dict[str, Any]]) -> str:
    first = runs[0]
    lines = [
        HEADING, "",
        f"`python -m bench.http_admission --clients {opts.clients} --calls {opts.calls} "
        f"--backlog {opts.backlog} --runs {opts.runs} --http-hop-ms {opts.http_hop_ms}` "
        f"(run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; seed {opts.seed}, a "
        f"{first['window_s']:g} s window, 2 cores shared with other work): {opts.clients} "
        f"plain `httpx` callers outside Airflow make {opts.calls} calls through the "
        "standalone API (`/schedule` -> the simulator -> `/complete`) while a drain solves "
        f"{opts.backlog} tasks on the same two models; the backend refuses (429) whatever "
        "would go over a limit and counts what it was offered. Each HTTP admission counts "
        f"in its window from {opts.http_hop_ms} ms after it was made (the API's hop "
        "allowance, `http_hop_ms`). One run per router guard; "
        "'+ hop': the callers tell `/complete` how long after their `/schedule` the backend "
        "received the call (`arrival_delay_s`), and the engine widens the guard to cover it.",
        "",
        "| guard (ms) | model | target rpm / tpm / concurrency | backend's peak offered "
        "requests / tokens / concurrency | window over target | 429s | guard at the end "
        "(ms) | admissions/s: HTTP + drain = all (capacity) | `/schedule` ms p50 / p95 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        label = f"{r['guard_ms']}{' + hop' if r.get('hop_reported') else ''}"
        for name, m in r["models"].items():
            t = m["targets"]
            lines.append(
                f"| {label} | {name} | {t['rpm']} / {t['tpm']} / "
                f"{t['max_concurrency']} | {m['peak_requests_in_window']} / "
                f"{m['peak_tokens_in_window']} / {m['peak_concurrency']} | "
                f"{'yes' if m['over_target'] else 'no'} | {m['rejected_429']} | "
                f"{m.get('guard_ms_at_end')} | "
                f"{r['http_admissions_per_s']} + {r['drain_admissions_per_s']} = "
                f"{r['all_admissions_per_s']} ({r['rpm_capacity_per_s']}) | "
                f"{r['schedule_ms_p50']} / {r['schedule_ms_p95']} |")
    spends = [(r, m["spend"]) for r in runs for m in r["models"].values() if m.get("spend")]
    if spends:
        lines += ["", "Spend on `fast` (priced $1 / $4 per million input / output tokens, "
                  "budget for the day in micro-dollars; once it is spent, both kinds of "
                  "caller go on to `slow`):", "",
                  "| run | budget | engine: settled (+ reserved) | the backend's accepted "
                  "tokens at those prices | within budget |", "|---|---|---|---|---|"]
        for r, s in spends:
            label = f"{r['guard_ms']}{' + hop' if r.get('hop_reported') else ''}"
            lines.append(f"| {label} | {s['budget_micro_usd']} | {s['settled_micro_usd']} "
                         f"(+ {s['reserved_micro_usd']}) | {s['backend_cost_micro_usd']} | "
                         f"{'yes' if s['within_budget'] else 'NO'} |")
    lines += [
        "",
        "A call admitted over HTTP reaches the backend later than a drain's (the answer "
        "travels back, the caller then calls): unless the hop allowance, the guard or both "
        "cover that delay, a window can end at the backend later than in the engine "
        "(docs/engine.md, \"Guard\"). Reported with `arrival_delay_s`, the engine also "
        "learns it per model (with real 60 s windows a few hundred ms cost under 1 % of the "
        "quota). "
        f"With roomy quotas and no backend call, {opts.clients} callers got "
        f"{first['raw_admissions_per_s']} admissions/s (`/schedule` + `/complete`; "
        f"`/schedule` median {first['raw_schedule_ms_p50']} ms, p95 "
        f"{first['raw_schedule_ms_p95']} ms) from the one uvicorn process: far above any "
        "LLM quota. The CPU of this shared machine bounds it (the callers' own Python "
        "process and the API's: two HTTP requests per admission), not Redis, whose engine "
        "decides thousands per second (\"Admission engine\" above). Timings on this "
        "shared machine vary from run to run: docs/http_api.md (\"Measured\") sums up "
        "several.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if min(opts.clients, opts.calls, opts.backlog) < 1 or opts.time_scale <= 0:
        print("error: --clients, --calls and --backlog must be >= 1 and --time-scale > 0",
              file=sys.stderr)
        return 2
    if not 0 <= opts.http_hop_ms <= 60_000:
        print(f"error: --http-hop-ms: {opts.http_hop_ms} is not between 0 and 60000",
              file=sys.stderr)
        return 2
    try:
        plan = [(int(r.removesuffix("+hop")), r.endswith("+hop")) for r in opts.runs.split(",")]
    except ValueError:
        print(f"error: --runs: {opts.runs!r} is not a comma-separated list of guards in "
              "whole milliseconds, each with an optional '+hop'", file=sys.stderr)
        return 2
    runs: list[dict[str, Any]] = []

    def run_all() -> int:
        for n, (guard, hop) in enumerate(plan):
            print(f"guard {guard} ms{', hop reported' if hop else ''}: running...", flush=True)
            runs.append(run(opts, guard, opts.raw_seconds if n == 0 else 0, hop))
            print(json.dumps(runs[-1]), flush=True)
        return 0

    status = guarded(run_all)
    if status:
        return status
    publish(report(opts, runs), HEADING, OUT, opts.write)
    if opts.out:
        opts.out.write_text(json.dumps(runs, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
