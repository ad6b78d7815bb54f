"""The CPU each answer costs, per side, without Airflow: drains (the ``DrainTrigger`` the
triggerer runs, each in a solver process of its own) against the simulator with roomy
quotas and near-zero latency, so neither quotas nor the backend's latency bind and CPU is
the limit; on demand, not in CI.

    python -m bench.solver_cpu                          # 2,000 tasks, 200 in flight, 3 runs
    python -m bench.solver_cpu --solvers 1,2 --hedging both   # 1 and 2 processes, A/B
    python -m bench.solver_cpu --profile out.pstats     # and a cProfile of the last run

A solver process's CPU covers all an answer costs it: admission through the engine's
asyncio client (``BatchAdmitter``), the HTTP call through aiohttp, the lease's completion,
the result writes to PostgreSQL (their worker thread is in the process), logging and
metrics. Redis, PostgreSQL and the simulator run in processes of their own; their CPU is
read from ``/proc`` (:mod:`bench.proc_cpu`): the run's ``redis-server`` and simulator, and
the PostgreSQL backends of the run's drains (their ``application_name`` names the run;
the server's background writers are not counted). Several ``--solvers`` counts are
measured in turn within each run, all processes of a count starting at once on one
backlog. Each run reports answers/s (tasks solved / wall time from the start signal to
the last drain's end), each side's CPU ms per answer and share of a core, Redis commands
and scripts per answer, the hedges sent per answer, and the TCP connections the solvers
opened to the simulator per call it served (counted on the simulator's side).
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
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import DEFAULT_DSN, drain_once, enqueue_synthetic, guarded, private_services
from bench.proc_cpu import PgBackends, ProcessCpu
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
    parser.add_argument("--runs", type=int, default=3,
                        help="runs, one after another (each drains once per --solvers count)")
    parser.add_argument("--solvers", type=_solver_counts, default=[1],
                        help="solver processes draining the backlog at once; several counts "
                             "(1,2) are measured in turn within each run")
    parser.add_argument("--prompt-chars", type=int, default=400, help="characters per prompt")
    parser.add_argument("--http-only", action="store_true",
                        help="only the backend calls (no admission, no store): their share")
    parser.add_argument("--hedging", choices=["on", "off", "both"], default="on",
                        help="the drain's hedge_late_calls: on (the default a deployment "
                             "has); off or both (interleaved) measure what hedges cost")
    parser.add_argument("--profile", type=Path,
                        help="write a cProfile of the last run's first solver process here "
                             "(pstats) and print its top")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN,
                        help="a PostgreSQL the benchmark may create and drop a schema in")
    parser.add_argument("--out", type=Path, help="also write the JSON results here")
    parser.add_argument("--baseline", action="store_true",
                        help="record the runs' solver CPU per answer (the first --solvers "
                             "count, hedging on) as bench/baselines/solver-cpu.json")
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


def _drain_child() -> None:
    """One solver process (``python -c``, its job as JSON in ``argv[1]``): import
    everything, say so, wait for a line on stdin, drain, and write its final event with
    its own wall and CPU. It speaks on the stdout it was given; its own stdout (logs)
    goes to stderr, so the pipe it answers on never fills while it runs."""
    job = json.loads(sys.argv[1])
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    from airflow_llm_router.triggers import DrainTrigger  # noqa: F401  (outside the run)

    print("ready", file=answer, flush=True)
    sys.stdin.readline()
    profile = job["profile"]
    # CPU time, not wall: on a loaded machine wall time charges preemption to whatever ran
    profiler = cProfile.Profile(time.process_time) if profile else None
    cpu0, wall0 = _cpu_s(), time.monotonic()
    if profiler is not None:
        profiler.enable()
    event = asyncio.run(drain_once(job["schema"], job["worker_id"], timeout_s=600,
                                   **job["settings"]))
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    cpu1 = _cpu_s()
    print(json.dumps({"event": event, "wall_s": time.monotonic() - wall0,
                      "cpu_s": cpu1[0] - cpu0[0] + cpu1[1] - cpu0[1]}), file=answer,
          flush=True)


def _drains(stack: ExitStack, solvers: int, schema: str, settings: dict[str, Any],
            profile: Path | None) -> tuple[list[dict[str, Any]], Callable[[], None]]:
    """Start ``solvers`` drain processes (fresh interpreters: nothing of this process's
    state), wait until each has imported everything; return a function that starts them
    all at once, and after it returns, their results. ``stack`` ends them first if the
    run is cut short (before the services they use stop and their schema is dropped)."""
    children = []
    for i in range(solvers):
        job = {"schema": schema, "worker_id": f"cpu-{schema}-{i}", "settings": settings,
               "profile": str(profile) if profile is not None and i == 0 else None}
        child = subprocess.Popen(
            [sys.executable, "-c", "from bench.solver_cpu import _drain_child; _drain_child()",
             json.dumps(job)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        stack.callback(_end, child)
        children.append(child)
    for child in children:
        if _line(child) != "ready":
            raise RuntimeError(f"a solver process did not start (status {child.poll()})")
    out: list[dict[str, Any]] = []

    def run() -> None:
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            line = _line(child)
            if not line:
                raise RuntimeError(f"a solver process ended (status {child.wait()})")
            out.append(json.loads(line))

    return out, run


def _line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    return child.stdout.readline().strip()


def _end(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.terminate()
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def run_once(opts: argparse.Namespace, solvers: int, profile: Path | None,
             hedging: bool = True) -> dict[str, Any]:
    """One drain of ``--tasks`` tasks by ``solvers`` processes at once, on a private Redis,
    schema and simulator; the CPU each answer cost each side."""
    import httpx
    import redis

    run_id = uuid.uuid4().hex[:8]
    schema, namespace = f"llmr_cpu_{run_id}", f"cpu-{run_id}"
    app_name = f"llmr-cpu-{run_id}"  # the drains' PostgreSQL backends, told apart
    prof = sim_profile(opts.models)
    with ExitStack() as stack:
        redis_server, sim, store = private_services(stack, opts.postgres_dsn, schema, prof)
        default_connections(redis_server.port, namespace,
                            _with_app_name(opts.postgres_dsn, app_name), sim.url)
        store.migrate()
        enqueue_synthetic(store, opts.tasks, opts.prompt_chars)
        roomy_quotas(stack, redis_server.url, namespace, prof)
        server = stack.enter_context(redis.Redis.from_url(redis_server.url))
        settings = {"max_in_flight": opts.max_in_flight, "claim_batch": opts.max_in_flight,
                    "hedge_late_calls": hedging}
        results, run = _drains(stack, solvers, schema, settings, profile)
        sides = ProcessCpu({"redis": redis_server.pid, "simulator": sim.pid})
        commands0 = _redis_commands(server)
        httpx.post(sim.url + "/stats/reset", timeout=30).raise_for_status()
        with PgBackends(opts.postgres_dsn, app_name) as pg:
            sides.start()
            wall0 = time.monotonic()
            run()
            wall = time.monotonic() - wall0
            spent = sides.stop()
        spent["postgres"] = pg.spent()
        connections = httpx.get(sim.url + "/stats", timeout=30).json()["connections"]
        commands = _redis_commands(server)
        commands.subtract(commands0)
        solved = store.counts().get("solved", 0)
    for r in results:
        if r["event"].get("status") != "done":
            raise RuntimeError(f"a drain ended {r['event']}")
    if solved != opts.tasks:
        raise RuntimeError(f"the drains solved {solved} of {opts.tasks} tasks")
    spent["solver"] = sum(r["cpu_s"] for r in results)
    row = _sides_row(solvers, solved, wall, spent, commands, pg.backends)
    row["hedging"] = "on" if hedging else "off"
    row["hedged_per_answer"] = round(
        sum(r["event"]["summary"]["hedged"] for r in results) / solved, 3)
    # from the simulator's side: the TCP connections the solvers opened, per call it served
    row["backend_connections"] = connections["connections"]
    row["new_connections_per_call"] = connections["connections_per_request"]
    row["solved_by_process"] = [r["event"]["summary"]["solved"] for r in results]
    return row


def _with_app_name(dsn: str, name: str) -> str:
    return f"{dsn}{'&' if '?' in dsn else '?'}application_name={name}"


def _redis_commands(server: Any) -> Counter[str]:
    """Calls of each command the run's Redis has processed so far."""
    stats = server.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


def _sides_row(solvers: int, solved: int, wall: float, spent: dict[str, float],
               commands: Counter[str], backends: int) -> dict[str, Any]:
    """A run's figures: answers/s, and per side the CPU ms per answer and its share of a
    core over the run."""
    per = {f"{side}_ms": round(1000 * cpu / solved, 3) for side, cpu in sorted(spent.items())}
    total = sum(spent.values())
    return {"solvers": solvers, "tasks": solved, "wall_s": round(wall, 3),
            "answers_per_s": round(solved / wall, 1), **per,
            "total_ms": round(1000 * total / solved, 3),
            "solver_cores": round(spent["solver"] / wall, 2),
            "redis_core": round(spent.get("redis", 0.0) / wall, 2),
            "redis_commands_per_answer": round(commands.total() / solved, 2),
            "redis_scripts_per_answer": round(
                (commands["evalsha"] + commands["eval"]) / solved, 2),
            "redis_commands": {name: round(n / solved, 2)
                               for name, n in commands.most_common(6) if n > 0},
            "pg_backends": backends, "load1": round(os.getloadavg()[0], 1)}


def _solver_counts(text: str) -> list[int]:
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give solver process counts >= 1, comma-separated (1,2)")
    return counts


def _summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per solver count, the median of each figure over its runs."""
    out = []
    for n, hedging in sorted({(r["solvers"], r["hedging"]) for r in rows}):
        mine = [r for r in rows if r["solvers"] == n and r["hedging"] == hedging]
        out.append({"solvers": n, "hedging": hedging, "runs": len(mine), **{
            key: statistics.median(r[key] for r in mine)
            for key in mine[0] if key.endswith(("_ms", "_per_s", "_cores", "_core",
                                                 "_per_answer", "_per_call"))}})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if opts.tasks < 1 or opts.max_in_flight < 1 or opts.models < 1 or opts.runs < 1:
        print("error: --tasks, --max-in-flight, --models and --runs must be >= 1",
              file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []

    def run_all() -> int:
        for i in range(opts.runs):
            if opts.http_only:
                rows.append(run_calls(opts))
                print(json.dumps(rows[-1]), flush=True)
                continue
            hedging = {"on": [True], "off": [False], "both": [True, False]}[opts.hedging]
            # interleaved: each run measures every count (and hedging)
            for n, hedge in ((n, h) for n in opts.solvers for h in hedging):
                profile = (opts.profile if i == opts.runs - 1 and n == opts.solvers[0]
                           and hedge == hedging[0] else None)
                rows.append(run_once(opts, n, profile, hedge))
                print(json.dumps(rows[-1]), flush=True)
                if profile is not None:
                    pstats.Stats(str(profile)).sort_stats("tottime").print_stats(30)
        return 0

    status = guarded(run_all)
    if status:
        return status
    summary: dict[str, Any] = (
        {"median_calls_per_s": statistics.median(r["calls_per_s"] for r in rows),
         "median_cpu_ms_per_call": statistics.median(r["cpu_ms_per_call"] for r in rows)}
        if opts.http_only else {"by_solvers": _summary(rows)})
    print(json.dumps(summary))
    if opts.out:
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(json.dumps({"runs": rows, **summary}, indent=2) + "\n")
    if opts.baseline:
        from bench.baselines import record

        runs = [r["solver_ms"] for r in rows
                if r.get("solvers") == opts.solvers[0] and r.get("hedging") == "on"]
        if not runs:
            print("error: --baseline needs runs with hedging on (--hedging on or both)",
                  file=sys.stderr)
            return 2
        command = "python -m bench.solver_cpu " + " ".join(argv or sys.argv[1:])
        print(f"wrote {record('solver-cpu', runs, command)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
