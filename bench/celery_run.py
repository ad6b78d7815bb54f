"""A multi-node run on one machine: W1 drained through Airflow's CeleryExecutor with two
Celery workers and two triggerers, the router on a local Redis Cluster; then the same with
one triggerer and one worker killed mid-run. On demand, not in CI.

    python -m bench.celery_run                       # both runs, ~4-5 min
    python -m bench.celery_run --runs kill --tasks 1000
    python -m bench.celery_run --runs kill --kill-at worker-busy --tasks 600 --router single

Per run, all fresh: a 3-master Redis Cluster on loopback ports (``LocalCluster``) holding
the router's namespace with the e2e quotas (``router_quotas``), reached by the
``llm_router`` connection's ``cluster`` extra; the simulator in its own process with W1's
profile and time scale; a task-store schema holding W1's prompts; and an Airflow stack
(``AirflowStack(executor="celery")``) on a new PostgreSQL metadata database, which is also
Celery's result backend, with the broker on the local Redis (database 15 by default, a queue
of the stack's own). Beside the stack's scheduler, triggerer, DAG processor and API server:
``triggerer-2`` and two Celery workers (``worker-1``, ``worker-2``). The DAG
(``bench/celery_dags/llm_router_celery.py``) maps ``--fan-out`` deferrable solvers; each
triggerer's ``[triggerer] capacity`` is half the fan-out (rounded up), so the drains span
both triggerers (with the default capacity the first triggerer to poll takes them all).

- ``steady``: nothing is killed.
- ``kill``: once a third of the backlog is solved and both triggerers hold drains, the
  stack's ``triggerer`` and ``worker-1`` get SIGKILL with every process under them (a node
  dies: no handler runs, no claim is handed back). A replacement triggerer
  (``triggerer-3``, as an orchestrator restarts a dead pod) starts at once; the survivor is
  full (capacity), so the dead one's drains move to the replacement once its heartbeat is
  older than ``triggerer_health_check_threshold`` (10 s here). With ``--kill-at
  worker-busy`` the two are killed instead as soon as ``worker-1`` runs a task of the DAG
  (a solver's start): that try is lost with its worker, Airflow fails it once its
  heartbeat is 30 s old (``task_instance_heartbeat_timeout``), and its retry runs on
  ``worker-2``.

Checks (exit 1 if one fails), read from the simulator's own ``/stats``, the task store and
an independent log of the store's writes (a PostgreSQL trigger records every update that
leaves a row solved):

- no window over target at the backend (``violations`` 0);
- nothing lost: every task solved, none pending, claimed or dead, and the DAG run succeeds;
- nothing solved twice: the log holds each task exactly once, none solved over a solved row;
- (kill) repeated backend calls (completed - tasks) are bounded by the calls in flight at
  the kill, read once the killed processes are gone: at most the tasks the killed drains
  held claimed, and at most the calls the backend had received minus the tasks the store
  had solved (a call is repeated only if a killed drain made it and its answer was not
  yet written).

Reported: makespan (first call at the backend -> last answer in the store, as
``bench/e2e``), trigger -> last answer, backend calls, 429s, tasks per triggerer job (the
``trigger`` table, polled), Celery tasks per worker (the result backend, with
``result_extended``), Airflow task tries, and CPU per component for the steady run.
Results: ``bench/out/<stamp>-celery/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

from airflow_llm_router.engine import AsyncRouterClient, RouterClient, RouterSettings
from airflow_llm_router.store import TaskStore
from bench.common import OUT_DIR, results_dir
from bench.e2e.workloads import build
from bench.triggerers import TriggerSpread, _store_times, _watch, cpu_snapshot, triggerer_jobs
from llm_router_devkit.demo.airflow_env import postgres_connection, router_connection
from llm_router_devkit.demo.router_quotas import router_quotas
from llm_router_devkit.demo.run import drop_namespace
from llm_router_devkit.demo.seed import seed_store
from llm_router_devkit.interrupt import interrupted, sigterm_as_interrupt
from llm_router_devkit.product_path import first_arrival_s
from llm_router_devkit.redis_tools import LocalCluster
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.server import SimulatorProcess
from llm_router_devkit.stack import CELERY_BROKER_URL, AirflowStack, PgServer, wait_for
from llm_router_devkit.stack_processes import descendants

ROOT = Path(__file__).resolve().parents[1]
DAGS_FOLDER = ROOT / "bench" / "celery_dags"
DAG_ID = "llm_router_celery"
RUNS = ("steady", "kill")
STARTUP_TIMEOUT_S = 180.0
HEALTH_CHECK_S = 10
WORKERS = ("worker-1", "worker-2")


def say(message: str) -> None:
    print(message, flush=True)


# -- the store's own witness --------------------------------------------------------------


def add_solve_log(dsn: str, schema: str) -> None:
    """Log every update that leaves a task solved (id, its status before, who held it): an
    answer written twice, or over a solved row, shows as a second row or ``was = solved``,
    whatever the drains report."""
    ident = sql.Identifier(schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {}.solve_log (task_id bigint NOT NULL, "
                             "was text NOT NULL, claimed_by text, "
                             "at timestamptz NOT NULL DEFAULT clock_timestamp())").format(ident))
        conn.execute(sql.SQL(
            "CREATE FUNCTION {s}.log_solve() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO {s}.solve_log (task_id, was, claimed_by) "
            "VALUES (NEW.id, OLD.status, OLD.claimed_by); RETURN NEW; END $$").format(s=ident))
        conn.execute(sql.SQL(
            "CREATE TRIGGER log_solve AFTER UPDATE ON {s}.tasks FOR EACH ROW "
            "WHEN (NEW.status = 'solved') EXECUTE FUNCTION {s}.log_solve()").format(s=ident))


def solve_log(dsn: str, schema: str) -> dict[str, int]:
    query = sql.SQL("SELECT count(*), count(DISTINCT task_id), "
                    "count(*) FILTER (WHERE was = 'solved') FROM {}.solve_log"
                    ).format(sql.Identifier(schema))
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return {"writes": int(row[0]), "tasks": int(row[1]), "over_solved": int(row[2])}


def claims_by_drain(dsn: str, schema: str) -> dict[int, int]:
    """Tasks claimed now, per drain (map index, from the claim's worker id
    ``dag.task.run.map_index.tryN``)."""
    query = sql.SQL("SELECT claimed_by, count(*) FROM {}.tasks WHERE status = 'claimed' "
                    "GROUP BY 1").format(sql.Identifier(schema))
    out: dict[int, int] = {}
    with psycopg.connect(dsn) as conn:
        for claimed_by, n in conn.execute(query):
            index = int(str(claimed_by).rsplit(".", 2)[1])
            out[index] = out.get(index, 0) + int(n)
    return out


def max_attempts(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql.SQL("SELECT max(attempts) FROM {}.tasks")
                           .format(sql.Identifier(schema))).fetchone()
    return int(row[0] or 0) if row else 0


# -- the metadata DB ----------------------------------------------------------------------


def meta_rows(meta: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(meta, autocommit=True) as conn:
        return list(conn.execute(query, args))


def celery_tasks_per_worker(meta: str) -> dict[str, int]:
    """Celery tasks (Airflow workloads) per worker, from the result backend's table."""
    rows = meta_rows(meta, "SELECT coalesce(worker, '?'), count(*) FROM celery_taskmeta "
                           "GROUP BY 1 ORDER BY 1")
    return {str(w).split("@")[0]: int(n) for w, n in rows}


def wait_for_job(meta: str, known: Sequence[int], what: str) -> int:
    """The id of a running triggerer job not in ``known``, once it heartbeats."""
    return int(wait_for(what, lambda: next((j for j in triggerer_jobs(meta)
                                            if j not in known), None), STARTUP_TIMEOUT_S, 0.5))


# -- the router's Redis -------------------------------------------------------------------


def router_conn(opts: argparse.Namespace, cluster: LocalCluster | None,
                namespace: str) -> tuple[str, dict[str, Any]]:
    """The router's URL (for this process) and its ``llm_router`` connection (for Airflow):
    the run's own cluster, or ``--router-redis-url``'s single node."""
    if cluster is not None:
        return cluster.url, {"conn_type": "llm_router", "host": "127.0.0.1",
                             "port": cluster.nodes[0].port,
                             "extra": {"cluster": True, "namespace": namespace}}
    return opts.router_redis_url, router_connection(opts.router_redis_url, namespace)


class ReleaseChannelHang(RuntimeError):
    """A fresh async router client could not subscribe to the release channel."""


def check_release_channel(url: str, namespace: str) -> None:
    """Fail fast if a fresh async client cannot subscribe to the release channel: what a
    drain does first in the triggerer, before any other command. On a Redis Cluster,
    redis-py's async ``ClusterPubSub`` of a client that has not yet run a command waits
    forever (its nodes are not discovered yet), and every drain would hang unseen."""

    async def subscribe() -> None:
        client = AsyncRouterClient.from_url(url, RouterSettings(namespace=namespace))
        try:
            await asyncio.wait_for(client.releases.start(), 10)
        finally:
            await asyncio.wait_for(client.aclose(), 10)

    try:
        asyncio.run(subscribe())
    except TimeoutError as err:
        raise ReleaseChannelHang(
            f"a fresh async router client on {url} did not subscribe to the release "
            "channel within 10 s: the drains would hang at start (on a Redis Cluster, "
            "ReleaseListener.start must initialize the cluster client before its first "
            "subscribe); run with --router single to measure the rest") from err


# -- one run ------------------------------------------------------------------------------


def _stack(opts: argparse.Namespace, cleanup: ExitStack, pg: PgServer, database: str,
           router: dict[str, Any], schema: str, sim_url: str) -> AirflowStack:
    pg.create_database(database)
    cleanup.callback(pg.drop_database, database)
    if opts.keep_home:  # kept for reading the components' logs afterwards
        home = Path(tempfile.mkdtemp(prefix="llmr-celery-"))
        say(f"  Airflow home (kept): {home}")
    else:
        home = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="llmr-celery-")))
    parallelism = opts.fan_out + 4
    return AirflowStack(
        home=home, dags_folder=DAGS_FOLDER, sql_alchemy_conn=pg.sqlalchemy_url(database),
        parallelism=parallelism, executor="celery", celery_broker_url=opts.broker_url,
        connections={
            "llm_router_default": router,
            "postgres_default": postgres_connection(opts.postgres_dsn),
            "models_backend_default": {"conn_type": "models_backend", "host": sim_url,
                                       "extra": {"timeout_s": 300}},
        },
        extra_env={
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(parallelism),
            "AIRFLOW__LOGGING__LOGGING_LEVEL": opts.log_level,
            "AIRFLOW__TRIGGERER__CAPACITY": str(-(-opts.fan_out // 2)),
            # a triggerer heartbeats every second and looks dead 10 s after its last one
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": str(HEALTH_CHECK_S),
            # a task running on a killed worker is failed (and retried) 30 s after its
            # last heartbeat, not the default 300 s
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            # the result backend records which worker ran each Celery task
            "AIRFLOW__CELERY__EXTRA_CELERY_CONFIG": json.dumps({"result_extended": True}),
            "LLMR_CELERY_FAN_OUT": str(opts.fan_out),
            "LLMR_CELERY_MAX_IN_FLIGHT": str(opts.max_in_flight),
            "LLMR_CELERY_CLAIM_BATCH": str(opts.claim_batch),
            "LLMR_CELERY_STORE_SCHEMA": schema,
        },
    )


def _wait_for_kill_point(stack: AirflowStack, store: TaskStore, spread: TriggerSpread,
                         meta: str, jobs: dict[str, int], tasks: int, when: str) -> None:
    """``third``: a third of the backlog solved, and both triggerers holding drains now;
    ``worker-busy``: ``worker-1`` running a task of the DAG (a solver's start)."""
    last_say = time.monotonic()
    worker = stack.component_pid("worker-1")

    def worker_busy() -> bool:
        tree = {worker, *descendants(worker)}
        return any(pid in tree for (pid,) in meta_rows(
            meta, "SELECT pid FROM task_instance WHERE dag_id = %s AND state = 'running'",
            DAG_ID))

    def ready() -> bool:
        nonlocal last_say
        stack.alive()
        spread.poll()
        holding = {int(r[0]) for r in meta_rows(
            meta, "SELECT DISTINCT triggerer_id FROM trigger WHERE triggerer_id IS NOT NULL")}
        solved = store.counts()["solved"]
        if time.monotonic() - last_say > 5:
            last_say = time.monotonic()
            say(f"  solved {solved}; triggerer jobs holding drains {sorted(holding)}")
        if when == "worker-busy":
            return worker_busy()
        return {jobs["triggerer"], jobs["triggerer-2"]} <= holding and solved >= tasks // 3

    wait_for(f"the kill point ({when})", ready, 300.0, 0.05)


def _kill_node(stack: AirflowStack, store: TaskStore, opts: argparse.Namespace, sim_url: str,
               meta: str, jobs: dict[str, int], schema: str) -> dict[str, Any]:
    """SIGKILL the stack's triggerer and worker-1 (with everything under them), start a
    replacement triggerer, and measure what was in flight."""
    doomed = [int(r[0]) for r in meta_rows(
        meta, "SELECT ti.map_index FROM trigger t JOIN task_instance ti "
              "ON ti.trigger_id = t.id WHERE t.triggerer_id = %s", jobs["triggerer"])]
    worker = stack.component_pid("worker-1")
    worker_tree = {worker, *descendants(worker)}
    running = meta_rows(meta, "SELECT map_index, pid FROM task_instance "
                              "WHERE dag_id = %s AND state = 'running'", DAG_ID)
    on_worker = sorted(int(i) for i, pid in running if pid in worker_tree)
    killed = stack.kill("triggerer") + stack.kill("worker-1")
    killed_at = time.time()
    # neither killed process can move now: what they held is fixed
    counts = store.counts()
    received = int(httpx.get(f"{sim_url}/stats", timeout=30).json()["totals"]["requests"])
    claims = claims_by_drain(opts.postgres_dsn, schema)
    stack.add_triggerer("triggerer-3")
    return {"killed_at": killed_at, "killed_pids": len(killed),
            "drains_on_killed_triggerer": sorted(doomed),
            "tasks_running_on_killed_worker": on_worker,
            "solved_at_kill": counts["solved"], "received_at_kill": received,
            "in_flight_at_kill": received - counts["solved"],
            "claimed_by_killed_drains": sum(claims.get(i, 0) for i in doomed)}


def run_once(kind: str, opts: argparse.Namespace) -> dict[str, Any]:
    profile = SimulatorProfile.default(time_scale=opts.time_scale, seed=opts.seed)
    tasks = build("W1", opts.seed, [m.name for m in profile.models]).initial[:opts.tasks]
    suffix = uuid.uuid4().hex[:10]
    namespace, schema = f"celery-{suffix}", f"llmr_celery_{suffix}"
    pg = PgServer.from_dsn(opts.postgres_dsn)
    t0 = time.monotonic()
    with ExitStack() as cleanup:
        cluster = cleanup.enter_context(LocalCluster(3)) if opts.router == "cluster" else None
        url, conn = router_conn(opts, cluster, namespace)
        check_release_channel(url, namespace)
        sim = SimulatorProcess(profile).start()
        cleanup.callback(sim.stop)
        router = RouterClient.from_url(url, RouterSettings(namespace=namespace))
        cleanup.callback(router.close)
        if cluster is None:  # a cluster goes with its namespace
            cleanup.callback(drop_namespace, router, namespace)
        for model, quota in router_quotas(profile).items():
            router.set_quota(model, quota)
        cleanup.callback(pg.drop_schema, schema)
        store = TaskStore(opts.postgres_dsn, schema=schema)
        cleanup.callback(store.close)
        store.migrate()
        add_solve_log(opts.postgres_dsn, schema)
        seed_store(store, tasks)
        stack = _stack(opts, cleanup, pg, schema, conn, schema, sim.url)
        stack.cli("db", "migrate", timeout_s=180)
        cleanup.callback(stack.stop)
        stack.start()
        meta = pg.dsn(schema)
        wait_for("the API server", lambda: stack.alive() and stack.token(), STARTUP_TIMEOUT_S)
        jobs = {"triggerer": wait_for_job(meta, [], "the stack's triggerer job")}
        stack.add_triggerer("triggerer-2")
        jobs["triggerer-2"] = wait_for_job(meta, list(jobs.values()), "triggerer-2's job")
        for name in WORKERS:
            stack.add_celery_worker(name, concurrency=opts.worker_concurrency)
        wait_for(f"the DAG processor to parse {DAG_ID}",
                 lambda: stack.alive() and stack.api("GET", f"/dags/{DAG_ID}").status_code
                 == 200, STARTUP_TIMEOUT_S, 0.5)
        stack.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False}).raise_for_status()
        say(f"  stack up in {time.monotonic() - t0:.0f} s; triggerer jobs {jobs}")
        spread = TriggerSpread(meta)
        cleanup.callback(spread.close)
        components = ["scheduler", "triggerer", "triggerer-2", *WORKERS, "dag-processor",
                      "api-server"]
        sim_pid = getattr(getattr(sim, "_proc", None), "pid", None)
        httpx.post(f"{sim.url}/stats/reset", timeout=10).raise_for_status()
        reset_epoch = time.time()
        cpu0 = cpu_snapshot(stack, components, sim_pid)
        run_id = f"celery_{suffix}"
        stack.api("POST", f"/dags/{DAG_ID}/dagRuns", json={
            "dag_run_id": run_id, "logical_date": None}).raise_for_status()
        triggered = time.time()
        kill: dict[str, Any] | None = None
        if kind == "kill":
            _wait_for_kill_point(stack, store, spread, meta, jobs, len(tasks),
                                 opts.kill_at)
            kill = _kill_node(stack, store, opts, sim.url, meta, jobs, schema)
            say(f"  killed triggerer (drains {kill['drains_on_killed_triggerer']}) and "
                f"worker-1 (running {kill['tasks_running_on_killed_worker']}) at "
                f"{kill['solved_at_kill']} solved")
            jobs["triggerer-3"] = wait_for_job(meta, list(jobs.values()),
                                               "the replacement triggerer's job")
        outcome = _watch(stack, store, spread, DAG_ID, run_id, opts.deadline_min * 60)
        ended = time.time()
        cpu = ({k: round(v - cpu0.get(k, 0.0), 2) for k, v in
                cpu_snapshot(stack, components, sim_pid).items()} if kill is None else None)
        stats = httpx.get(f"{sim.url}/stats", timeout=30).json()["totals"]
        timeline = httpx.get(f"{sim.url}/timeline", timeout=60,
                             params={"bucket_s": profile.scaled_window_s / 100}).json()
        rows = _store_times(opts.postgres_dsn, schema)
        counts = store.counts()
        log = solve_log(opts.postgres_dsn, schema)
        per_worker = celery_tasks_per_worker(meta)
        tries = meta_rows(meta, "SELECT map_index, try_number, state FROM task_instance "
                                "WHERE dag_id = %s ORDER BY map_index", DAG_ID)
        attempts = max_attempts(opts.postgres_dsn, schema)
        names = {str(job): name for name, job in jobs.items()}
        spread_summary = spread.summary(list(jobs.values()))
        stopped = stack.stop()
        say(f"  {outcome}; stack stopped in {stopped.term_s:.1f} s")
    first = first_arrival_s(timeline)
    first_epoch = reset_epoch + first if first is not None else None
    last = rows["last_solved"]
    result: dict[str, Any] = {
        "run": kind if kind == "steady" else f"kill at {opts.kill_at}",
        "router": opts.router, "outcome": outcome, "tasks": len(tasks),
        "fan_out": opts.fan_out, "max_in_flight": opts.max_in_flight, "time_scale": opts.time_scale,
        "window_s": profile.scaled_window_s, "solved": rows["solved"], "counts": counts,
        "makespan_s": (last - first_epoch) if last and first_epoch else None,
        "trigger_to_last_answer_s": (last - triggered) if last else None,
        "run_wall_s": ended - triggered,
        "backend": {k: stats.get(k) for k in ("requests", "completed", "rejected_429",
                                              "violations")},
        "solve_log": log, "max_attempts": attempts,
        "triggers_per_triggerer": {names.get(j, j): n for j, n in
                                   spread_summary["per_triggerer_job"].items()},
        "triggers_moved": spread_summary["moved"],
        "celery_tasks_per_worker": per_worker,
        "airflow_tries": [list(map(str, r)) for r in tries],
        "cpu_s": cpu, "kill": kill, "load_average_at_end": os.getloadavg(),
    }
    result["checks"] = checks(result)
    return result


def checks(r: dict[str, Any]) -> dict[str, bool]:
    c, b, log, tasks = r["counts"], r["backend"], r["solve_log"], r["tasks"]
    out = {
        "no window over target at the backend": b["violations"] == 0,
        "nothing lost (all solved, none pending/claimed/dead, run success)":
            r["outcome"] == "done" and c["solved"] == tasks
            and c["pending"] == c["claimed"] == c["dead"] == 0,
        "nothing solved twice (solve log: each task once)":
            log["writes"] == log["tasks"] == tasks and log["over_solved"] == 0,
    }
    if r["kill"] is not None:
        repeated = b["completed"] - tasks
        # two bounds, each alone sufficient: a call is made again only if a killed drain
        # held its task claimed, and only if the backend had it and the store no answer
        out["repeats bounded by the calls in flight at the kill"] = (
            0 <= repeated <= min(r["kill"]["claimed_by_killed_drains"],
                                 r["kill"]["in_flight_at_kill"]))
    return out


# -- the report ---------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def table(rows: Sequence[dict[str, Any]]) -> str:
    head = ("| run | router Redis | solved | makespan s | trigger to last answer s | backend calls "
            "(completed) | 429s | window violations | repeated calls | bound: claims of "
            "killed drains / in flight at kill | triggers per triggerer | Celery tasks per "
            "worker | max task attempts | max Airflow try | checks |")
    lines = [head, "|" + "---|" * head.count(" |")]
    for r in rows:
        b, k = r["backend"], r["kill"]
        bound = "—" if k is None else \
            f"{k['claimed_by_killed_drains']} / {k['in_flight_at_kill']}"
        trig = ", ".join(f"{n}: {c}" for n, c in r["triggers_per_triggerer"].items())
        workers = ", ".join(f"{n}: {c}" for n, c in r["celery_tasks_per_worker"].items())
        ok = all(r["checks"].values())
        lines.append(
            f"| {r['run']} | {r['router']} | {r['solved']}/{r['tasks']} | "
            f"{_fmt(r['makespan_s'])} | "
            f"{_fmt(r['trigger_to_last_answer_s'])} | {b['requests']} ({b['completed']}) | "
            f"{b['rejected_429']} | {b['violations']} | {b['completed'] - r['tasks']} | "
            f"{bound} | {trig} | {workers} | {r['max_attempts']} | "
            f"{max(int(t[1]) for t in r['airflow_tries'])} | "
            f"{'pass' if ok else 'FAIL'} |")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.celery_run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", default=list(RUNS), choices=RUNS)
    p.add_argument("--kill-at", choices=("third", "worker-busy"), default="third",
                   help="when the kill run kills: a third solved with drains on both "
                        "triggerers, or as soon as worker-1 runs a solver's start")
    p.add_argument("--tasks", type=int, default=2000, help="the first N of W1's 2,000")
    p.add_argument("--fan-out", type=int, default=4, help="mapped solvers (>= 2)")
    p.add_argument("--max-in-flight", type=int, default=50, help="calls per solver")
    p.add_argument("--claim-batch", type=int, default=50)
    p.add_argument("--worker-concurrency", type=int, default=3,
                   help="task slots per Celery worker")
    p.add_argument("--time-scale", type=float, default=3.0, help="as bench/e2e (default 3)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--deadline-min", type=float, default=6.0, help="per run, from trigger")
    p.add_argument("--router", choices=("cluster", "single"), default="cluster",
                   help="the router's Redis: a fresh 3-master cluster per run, or the "
                        "single node of --router-redis-url")
    p.add_argument("--router-redis-url", default=os.environ.get(
        "LLMR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument("--broker-url", default=os.environ.get("LLMR_CELERY_BROKER_URL",
                                                          CELERY_BROKER_URL))
    p.add_argument("--postgres-dsn", default=os.environ.get(
        "LLMR_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"))
    p.add_argument("--out", type=Path, default=OUT_DIR)
    p.add_argument("--log-level", default="WARNING", help="the components' logging level")
    p.add_argument("--keep-home", action="store_true",
                   help="keep each stack's Airflow home (its components' logs)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if not 1 <= opts.tasks <= 2000:
        print("error: --tasks must be 1..2000", file=sys.stderr)
        return 2
    if opts.fan_out < 2:
        print("error: --fan-out must be at least 2 (one drain per triggerer)", file=sys.stderr)
        return 2
    if opts.worker_concurrency < 1:
        print("error: --worker-concurrency must be at least 1", file=sys.stderr)
        return 2
    out, command, started = results_dir(opts.out, "celery", "bench.celery_run", argv)
    rows: list[dict[str, Any]] = []
    try:
        with sigterm_as_interrupt():
            for kind in opts.runs:
                say(f"=== {kind} ({opts.tasks} W1 tasks, {opts.fan_out} solvers x "
                    f"{opts.max_in_flight}, CeleryExecutor, 2 workers, 2 triggerers) ===")
                rows.append(run_once(kind, opts))
                (out / "celery.json").write_text(json.dumps({"rows": rows}, indent=2))
    except KeyboardInterrupt as err:  # Ctrl-C: 130, SIGTERM: 143
        return interrupted(err, "every stack was stopped")
    except ReleaseChannelHang as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    (out / "celery.json").write_text(json.dumps({"rows": rows, "started": started},
                                                indent=2))
    text = [f"`{command}` (run {started}, {os.cpu_count()} CPUs)", "", table(rows)]
    failed = [f"{r['run']}: {name}" for r in rows for name, ok in r["checks"].items()
              if not ok]
    text += ["", "failed checks: " + "; ".join(failed) if failed else "every check passed"]
    (out / "celery.md").write_text("\n".join(text) + "\n")
    say("\n".join(text))
    say(f"results in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
