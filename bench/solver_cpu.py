"""The solver's CPU per call, without Airflow: one drain (the ``DrainTrigger`` the
triggerer runs) against the simulator with roomy quotas and near-zero latency, so
neither quotas nor the backend's latency bind and the solver's own CPU is the limit;
on demand, not in CI.

    python -m bench.solver_cpu                       # 2,000 tasks, 200 in flight, 3 runs
    python -m bench.solver_cpu --profile out.pstats  # and a cProfile of the last run

Everything a call costs in the solver's process is counted: admission through the
engine's asyncio client (``BatchAdmitter``), the HTTP call through httpx, the lease's
completion, the result writes to PostgreSQL (their worker thread is in this process),
logging and metrics. Redis, PostgreSQL and the simulator run in processes of their own.
Each run reports calls/s (tasks solved / the drain's wall time) and the process's CPU
seconds per call (``resource.getrusage``: user + system, all threads).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import resource
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import DEFAULT_DSN, drain_once, guarded, private_services
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.profile import ModelProfile


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.solver_cpu", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--tasks", type=int, default=2000, help="tasks drained per run")
    parser.add_argument("--max-in-flight", type=int, default=200,
                        help="the drain's max_in_flight")
    parser.add_argument("--models", type=int, default=2,
                        help="models with a roomy quota (the tasks allow any)")
    parser.add_argument("--runs", type=int, default=3, help="drains, one after another")
    parser.add_argument("--prompt-chars", type=int, default=400, help="characters per prompt")
    parser.add_argument("--http-only", action="store_true",
                        help="only the backend calls (no admission, no store): their share")
    parser.add_argument("--profile", type=Path,
                        help="write a cProfile of the last run here (pstats) and print its top")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN,
                        help="a PostgreSQL the benchmark may create and drop a schema in")
    parser.add_argument("--out", type=Path, help="also write the JSON results here")
    return parser


def sim_profile(models: int) -> SimulatorProfile:
    """Models answering in ~5 ms (wall) with no provider limits."""
    return SimulatorProfile(time_scale=200.0, seed=1, models=[
        ModelProfile(name=f"m{i}", median_s=1.0, sigma=0.2, min_s=0.5, max_s=2.0,
                     tail_rate=0.0, output_tokens_mean=100)
        for i in range(models)])


def default_connections(redis_port: int, namespace: str, dsn: str, sim_url: str) -> None:
    """The default connections a ``DrainTrigger`` of this process reads (as Airflow's
    ``AIRFLOW_CONN_*`` environment variables): the private Redis, PostgreSQL, simulator."""
    os.environ.update({
        "AIRFLOW_CONN_LLM_ROUTER_DEFAULT": json.dumps(
            {"conn_type": "llm_router", "host": "127.0.0.1", "port": redis_port,
             "extra": {"namespace": namespace}}),
        "AIRFLOW_CONN_POSTGRES_DEFAULT": dsn,
        "AIRFLOW_CONN_MODELS_BACKEND_DEFAULT": json.dumps(
            {"conn_type": "models_backend", "host": sim_url, "extra": {"timeout_s": 60}}),
    })


def roomy_quotas(stack: ExitStack, redis_url: str, namespace: str,
                 prof: SimulatorProfile) -> None:
    """Quotas far above what a run uses for every model of ``prof``: they never bind."""
    from airflow_llm_router.engine import RouterClient, RouterSettings

    router = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    stack.callback(router.close)
    for m in prof.models:
        router.set_quota(m.name, {"rpm": 10_000_000, "tpm": 10_000_000_000,
                                  "max_concurrency": 100_000, "expected_output_tokens": 100})


def _cpu_s() -> tuple[float, float]:
    """User and system CPU seconds of this process (every thread) so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _result(solved: int, wall: float, cpu0: tuple[float, float]) -> dict[str, Any]:
    cpu1 = _cpu_s()
    user, system = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    cpu = user + system
    return {"tasks": solved, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "calls_per_s": round(solved / wall, 1),
            "cpu_ms_per_call": round(1000 * cpu / solved, 3),
            "system_share": round(system / cpu, 2), "cpu_share": round(cpu / wall, 2),
            "load1": round(os.getloadavg()[0], 1)}


async def _calls_only(url: str, opts: argparse.Namespace) -> tuple[float, tuple[float, float]]:
    """``--tasks`` backend calls, ``--max-in-flight`` at once, through the solver's HTTP
    pools: the wall time and the CPU counters at its start."""
    from airflow_llm_router.backend import BackendConfig, call_single, http_client

    config = BackendConfig(base_url=url, timeout_s=60)
    slots = asyncio.Semaphore(opts.max_in_flight)
    prompt = "x" * opts.prompt_chars

    async def one(i: int) -> None:
        async with slots:
            result = await call_single(http, config, model=f"m{i % opts.models}",
                                       prompt=prompt, on_sent=lambda: None)
        if result.status != "ok":
            raise RuntimeError(f"a backend call failed: {result.error}")

    async with await http_client(config, opts.max_in_flight) as http:
        cpu0, wall0 = _cpu_s(), time.monotonic()
        await asyncio.gather(*(one(i) for i in range(opts.tasks)))
        return time.monotonic() - wall0, cpu0


def run_calls(opts: argparse.Namespace) -> dict[str, Any]:
    """``--http-only``: the backend calls alone, against a private simulator."""
    from llm_router_devkit.simulator.server import SimulatorProcess

    with SimulatorProcess(sim_profile(opts.models)) as sim:
        wall, cpu0 = asyncio.run(_calls_only(sim.url, opts))
    return _result(opts.tasks, wall, cpu0)


def run_once(opts: argparse.Namespace, profiler: cProfile.Profile | None) -> dict[str, Any]:
    """One drain of ``--tasks`` tasks on a private Redis, schema and simulator."""
    run_id = uuid.uuid4().hex[:8]
    schema, namespace = f"llmr_cpu_{run_id}", f"cpu-{run_id}"
    prof = sim_profile(opts.models)
    with ExitStack() as stack:
        redis_server, sim, store = private_services(stack, opts.postgres_dsn, schema, prof)
        default_connections(redis_server.port, namespace, opts.postgres_dsn, sim.url)
        store.migrate()
        store.enqueue([f"task {i} " + "x" * opts.prompt_chars for i in range(opts.tasks)])
        roomy_quotas(stack, redis_server.url, namespace, prof)
        cpu0, wall0 = _cpu_s(), time.monotonic()
        if profiler is not None:
            profiler.enable()
        event = asyncio.run(drain_once(schema, f"cpu-{run_id}", timeout_s=600,
                                       max_in_flight=opts.max_in_flight,
                                       claim_batch=opts.max_in_flight))
        if profiler is not None:
            profiler.disable()
        wall = time.monotonic() - wall0
        result = _result(store.counts().get("solved", 0), wall, cpu0)
    if event.get("status") != "done" or result["tasks"] != opts.tasks:
        raise RuntimeError(f"the drain solved {result['tasks']} of {opts.tasks} tasks: "
                           f"{event}")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if opts.tasks < 1 or opts.max_in_flight < 1 or opts.models < 1 or opts.runs < 1:
        print("error: --tasks, --max-in-flight, --models and --runs must be >= 1",
              file=sys.stderr)
        return 2
    import airflow_llm_router.triggers  # noqa: F401  (Airflow's imports, outside the runs)
    rows: list[dict[str, Any]] = []

    def run_all() -> int:
        for i in range(opts.runs):
            last = opts.profile is not None and i == opts.runs - 1
            profiler = cProfile.Profile() if last else None
            rows.append(run_calls(opts) if opts.http_only else run_once(opts, profiler))
            print(json.dumps(rows[-1]), flush=True)
            if profiler is not None:
                profiler.dump_stats(opts.profile)
                pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        return 0

    status = guarded(run_all)
    if status:
        return status
    summary = {"runs": len(rows),
               "median_calls_per_s": statistics.median(r["calls_per_s"] for r in rows),
               "median_cpu_ms_per_call": statistics.median(r["cpu_ms_per_call"] for r in rows)}
    print(json.dumps(summary))
    if opts.out:
        opts.out.write_text(json.dumps({"runs": rows, **summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
