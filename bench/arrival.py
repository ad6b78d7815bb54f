"""Start on arrival: how long from an enqueue on an idle system to the first admission?

Runs the real Airflow components (scheduler, triggerer, DAG processor, API server;
LocalExecutor, a fresh PostgreSQL metadata database) with the example ``llm_router_drain``
DAG unpaused, the simulator at real time scale, and nothing in the backlog. Then, several
times: enqueue a few prompts, and time the path to the first admission in the router, with
the steps between them from Airflow's REST API:

    enqueue -> asset event (the watcher's trigger fired) -> DAG run queued -> sensor started
    -> first solver started -> first admission (the solver's trigger runs)

and, with ``--warm-trials``, the same arrival while a run's solvers linger (``linger_s``):
enqueue -> first admission with no Airflow step in between.

Each trial waits for the previous run to end and the system to be idle again.

    python bench/arrival.py          # 5 trials; writes its section of bench/out/benchmarks.md
    python bench/arrival.py --trials 2 --no-write
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as ``python bench/<name>.py`` from anywhere
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from airflow_llm_router.engine import RouterClient, RouterSettings  # noqa: E402
from airflow_llm_router.store import APPLICATION_NAME, TaskStore  # noqa: E402
from bench.common import BENCHMARKS_MD, drop_namespace, interruptible, publish  # noqa: E402
from llm_router_devkit.simulator import SimulatorProcess, SimulatorProfile  # noqa: E402
from llm_router_devkit.simulator.profile import ModelProfile  # noqa: E402
from llm_router_devkit.stack import AirflowStack, PgServer, wait_for  # noqa: E402

SECTION = "## Start on arrival: enqueue to first admission"
DAG_ID = "llm_router_drain"
#: The example DAG's store: schema ``llm_router`` on the ``postgres_default`` connection,
#: which here points at a database of this run's own.
STORE_SCHEMA = "llm_router"
STEPS = ("asset event", "run queued", "sensor started", "solver started", "first admission")
#: The arrival watcher folds enqueues within this long of its last event into one more event
#: at the end of it (``BacklogArrivalTrigger.min_interval_s``): a trial waits it out, or it
#: would time the fold, not the cold path.
FOLD_S = 10.0
#: Solver tasks: the lead (started with the run) and the mapped ones.
SOLVERS = ("lead", "solve")


def _solved_at_least(store: TaskStore, count: int) -> bool | None:
    return store.counts()["solved"] >= count or None


def _profile() -> SimulatorProfile:
    model = ModelProfile(name="chat", median_s=1.0, sigma=0.2, min_s=0.5, max_s=2.0,
                         output_tokens_mean=100, rpm=600, tpm=None, max_concurrency=None)
    return SimulatorProfile(time_scale=1.0, seed=1, models=[model])


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _admitted(router: RouterClient) -> int:
    return sum(m.counters.get("admitted", 0) for m in router.stats().models.values())


def _watchers(pg: PgServer, dbname: str) -> int:
    """Backlog watchers sitting on LISTEN in the store's database: the arrival trigger, and
    each lingering solver."""
    with psycopg.connect(pg.dsn(dbname), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                           " AND datname = %s AND state = 'idle'",
                           (APPLICATION_NAME, dbname)).fetchone()
    return int(row[0]) if row else 0


def _first_admission(store: TaskStore, router: RouterClient, n: int, timeout_s: float
                     ) -> tuple[float, float]:
    """Enqueue ``n`` prompts; (enqueue time, seconds to the first admission)."""
    before = _admitted(router)
    enqueued = time.time()
    store.enqueue([f"Arrival check {uuid.uuid4().hex[:6]}: answer in one word." for _ in range(n)])
    wait_for("the first admission", lambda: _admitted(router) > before or None, timeout_s, 0.02)
    return enqueued, time.time() - enqueued


def warm_trials(stack: AirflowStack, store: TaskStore, router: RouterClient, pg: PgServer,
                dbname: str, args: argparse.Namespace) -> list[float]:
    """A run whose solvers linger after the backlog empties; then each arrival's seconds
    to its first admission, with no Airflow step in between."""
    stack.api("POST", f"/dags/{DAG_ID}/dagRuns", json={
        "dag_run_id": f"warm_{uuid.uuid4().hex[:6]}", "logical_date": None,
        "conf": {"linger_s": 600}}).raise_for_status()
    out = []
    for k in range(args.warm_trials + 1):  # the first only brings the solvers up
        solved = store.counts()["solved"]
        _, seconds = _first_admission(store, router, args.prompts, args.timeout_s)
        target = solved + args.prompts
        wait_for("the prompts solved", partial(_solved_at_least, store, target),
                 args.timeout_s, 0.1)
        wait_for("the solvers to linger", lambda: _watchers(pg, dbname) >= 2 or None,
                 args.timeout_s, 0.05)
        if k:
            out.append(seconds)
            print(f"warm trial {k}: first admission {seconds:.3f} s", flush=True)
    return out


def _runs(stack: AirflowStack) -> list[dict[str, Any]]:
    doc = stack.api("GET", f"/dags/{DAG_ID}/dagRuns", params={"limit": 100}).json()
    return list(doc.get("dag_runs", []))


def _task_starts(stack: AirflowStack, run_id: str) -> dict[str, float]:
    doc = stack.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances").json()
    out: dict[str, float] = {}
    for ti in doc.get("task_instances", []):
        start = _epoch(ti.get("start_date"))
        if start is not None:
            key = ti["task_id"]
            out[key] = min(out.get(key, start), start)
    return out


def _asset_event(stack: AirflowStack, after: float, latest: bool = False) -> float | None:
    """The first asset event from ``after`` on (or the latest of all)."""
    doc = stack.api("GET", "/assets/events",
                    params={"limit": 100, "order_by": "-timestamp"}).json()
    stamps = [_epoch(e.get("timestamp")) for e in doc.get("asset_events", [])]
    later = [s for s in stamps if s is not None and s >= after - 1.0]
    if not later:
        return None
    return max(later) if latest else min(later)


def trial(stack: AirflowStack, store: TaskStore, router: RouterClient, n: int,
          timeout_s: float) -> dict[str, float]:
    """One enqueue on an idle system; seconds from the enqueue to each step."""
    last_event = _asset_event(stack, 0.0, latest=True)
    if last_event is not None:  # a clock interval, not an event: the watcher's fold
        time.sleep(max(0.0, last_event + FOLD_S + 0.5 - time.time()))
    before_runs = {r["dag_run_id"] for r in _runs(stack)}
    enqueued, seconds = _first_admission(store, router, n, timeout_s)
    admitted_at = enqueued + seconds
    new = wait_for("the new DAG run", lambda: [r for r in _runs(stack)
                                               if r["dag_run_id"] not in before_runs] or None,
                   30.0, 0.2)
    run = new[0]
    wait_for("the run to end", lambda: stack.api(
        "GET", f"/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}").json().get("state")
        in ("success", "failed") or None, timeout_s, 0.5)
    starts = _task_starts(stack, run["dag_run_id"])
    run = stack.api("GET", f"/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}").json()
    stamps = {
        "asset event": _asset_event(stack, enqueued),
        "run queued": _epoch(run.get("queued_at")),
        "sensor started": starts.get("advise"),
        "solver started": min((starts[t] for t in SOLVERS if t in starts), default=None),
        "first admission": admitted_at,
    }
    return {k: (v - enqueued if v is not None else float("nan")) for k, v in stamps.items()}


def report(args: argparse.Namespace, trials: list[dict[str, float]], warm: list[float],
           setup: dict[str, float], started: str) -> str:
    lines = [
        SECTION,
        "",
        "How soon a drain starts when work arrives on an idle system (`bench/arrival.py`).",
        "",
        f"- Command: `python bench/arrival.py --trials {args.trials} --warm-trials"
        f" {args.warm_trials}` (run {started}): the real",
        "  scheduler, triggerer, DAG processor and API server (LocalExecutor, PostgreSQL",
        "  metadata database), the example `llm_router_drain` DAG unpaused, the simulator at",
        f"  real time scale; each trial enqueues {args.prompts} prompts after the previous run",
        "  ended, and polls the router's admission counter every 20 ms.",
        f"- Machine: {os.cpu_count()} CPUs, shared with other work. Stack start-up"
        f" {setup['stack_up_s']:.0f} s, DAG parsed and the watcher listening after"
        f" {setup['watching_s']:.0f} s more, and the first run's first admission after"
        f" {setup['first_run_s']:.2f} s (once per deployment, not per arrival: the API"
        " server's first task-start call takes seconds; that run is not a trial).",
        "- Path: the enqueue's `pg_notify` wakes `BacklogArrivalTrigger` (an asset watcher in",
        "  the triggerer), whose event queues a run of the asset-scheduled DAG; its `lead`",
        "  solver and its `advise` sensor start together, and the lead claims and admits from",
        "  its worker (`start_in_worker_s`) before it defers. Each trial starts at least"
        f" {FOLD_S:g} s",
        "  after the previous asset event (the watcher folds enqueues within that interval).",
        "",
        "Seconds from the enqueue to each step (median, min, max over the trials):",
        "",
        "| step | median s | min s | max s |",
        "|---|--:|--:|--:|",
    ]
    for step in STEPS:
        values = [t[step] for t in trials if t[step] == t[step]]
        if values:
            lines.append(f"| {step} | {statistics.median(values):.2f} | {min(values):.2f} |"
                         f" {max(values):.2f} |")
    firsts = sorted(t["first admission"] for t in trials)
    p95 = firsts[max(0, math.ceil(0.95 * len(firsts)) - 1)]  # nearest rank
    verdict = "met" if p95 < 3 else "missed"
    under = sum(1 for f in firsts if f < 3)
    lines += ["", f"Target enqueue-to-first-admission under 3 s at the 95th percentile, cold"
              f" (no run active): **{verdict}** (95th percentile {p95:.2f} s by nearest rank,"
              f" median {statistics.median(firsts):.2f} s; {under} of {len(firsts)} trials"
              f" under 3 s, worst {firsts[-1]:.2f} s)."]
    if warm:
        lines += ["", f"Warm (a run triggered with `{{\"linger_s\": 600}}` whose solvers wait in"
                  " the triggerer after the backlog empties): enqueue to first admission median"
                  f" {statistics.median(warm) * 1000:.0f} ms (min {min(warm) * 1000:.0f},"
                  f" max {max(warm) * 1000:.0f} ms) over {len(warm)} arrivals: no Airflow"
                  " step in between, the solvers' LISTEN wakes them."]
    lines += ["", "Where the cold path's time goes: Airflow's loops. The triggerer hands the"
              " watcher's event on within its one-second loop; the scheduler queues the run and"
              " its first tasks on its own loop; the lead needs a worker start. From the lead's"
              " start to its first admission is the router's part (connections, a claim, an"
              " admission), which is what the warm path shows.",
              ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--prompts", type=int, default=5, help="prompts per enqueue")
    p.add_argument("--warm-trials", type=int, default=5,
                   help="arrivals measured while a lingering run waits (0: none)")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--postgres-dsn", default="host=127.0.0.1 port=5432 dbname=test user=postgres")
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--keep-home", type=Path, help="keep AIRFLOW_HOME (logs) here")
    p.add_argument("--out", type=Path, default=BENCHMARKS_MD)
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--baseline", action="store_true",
                   help="record the trials as the baselines arrival-cold and arrival-warm "
                        "(bench/baselines/), the figures of docs/benchmarks.md's targets table")
    args = p.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    suffix = uuid.uuid4().hex[:8]
    pg = PgServer.from_dsn(args.postgres_dsn)
    meta_db, store_db, namespace = f"llmr_arr_meta_{suffix}", f"llmr_arr_{suffix}", f"arr-{suffix}"
    setup: dict[str, float] = {}
    with ExitStack() as cleanup:
        home = args.keep_home or Path(cleanup.enter_context(tempfile.TemporaryDirectory()))
        home.mkdir(parents=True, exist_ok=True)
        for db in (meta_db, store_db):
            pg.create_database(db)
            cleanup.callback(pg.drop_database, db)
        cleanup.callback(drop_namespace, args.redis_url, namespace)
        sim = cleanup.enter_context(SimulatorProcess(_profile()))
        router = RouterClient.from_url(args.redis_url, RouterSettings(namespace=namespace))
        cleanup.callback(router.close)
        router.set_quota("chat", {"rpm": 600, "tpm": 10**9, "max_concurrency": 100,
                                  "expected_latency_s": 1.0})
        store = TaskStore(pg.dsn(store_db), schema=STORE_SCHEMA)
        cleanup.callback(store.close)
        store.migrate()
        stack = AirflowStack(
            home=home, dags_folder=ROOT / "example_dags",
            sql_alchemy_conn=pg.sqlalchemy_url(meta_db), parallelism=24,
            # cold trials need each run to end with its backlog (the DAG's default lingers)
            extra_env={"LLM_ROUTER_DRAIN_LINGER_S": "0"},
            connections={
                "llm_router_default": {"conn_type": "llm_router", "host": "127.0.0.1",
                                       "port": 6379, "extra": {"namespace": namespace}},
                "postgres_default": pg.airflow_conn(store_db),
                "models_backend_default": {"conn_type": "models_backend", "host": sim.url},
            })
        print("airflow: db migrate ...", flush=True)
        stack.cli("db", "migrate", timeout_s=120)
        mark = time.monotonic()
        cleanup.callback(stack.stop)
        stack.start()
        wait_for("the API server", lambda: stack.alive() and stack.token(), 90.0)
        setup["stack_up_s"] = time.monotonic() - mark
        mark = time.monotonic()
        wait_for(f"{DAG_ID} parsed", lambda: stack.alive() and stack.api(
            "GET", f"/dags/{DAG_ID}").status_code == 200, 90.0, 0.5)
        stack.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False}).raise_for_status()
        wait_for("the arrival watcher to listen", lambda: _watchers(pg, store_db) >= 1, 90.0, 0.2)
        setup["watching_s"] = time.monotonic() - mark
        print(f"stack up in {setup['stack_up_s']:.0f} s, watcher listening after "
              f"{setup['watching_s']:.0f} s more", flush=True)
        # The API server answers its first task-start call seconds late (once per server
        # start, measured at 4.3 s): that run is the deployment's, not an arrival's
        first = trial(stack, store, router, args.prompts, args.timeout_s)
        setup["first_run_s"] = first["first admission"]
        print("first run after the stack started (not a trial): " + ", ".join(
            f"{s} {v:.2f} s" for s, v in first.items()), flush=True)
        results = []
        for k in range(args.trials):
            result = trial(stack, store, router, args.prompts, args.timeout_s)
            results.append(result)
            print(f"trial {k + 1}: " + ", ".join(f"{s} {v:.2f} s" for s, v in result.items()),
                  flush=True)
        warm = warm_trials(stack, store, router, pg, store_db, args) if args.warm_trials else []
    text = report(args, results, warm, setup, started)
    publish(text, SECTION, args.out, write=not args.no_write)
    if args.baseline:
        record_baselines(args, results, warm)
    return 0


def record_baselines(args: argparse.Namespace, trials: list[dict[str, float]],
                     warm: list[float]) -> None:
    """Write the cold trials' (and the warm arrivals') first admissions as baselines."""
    from bench.baselines import record

    words = ["python", "bench/arrival.py", "--trials", str(args.trials), "--warm-trials",
             str(args.warm_trials), "--no-write"]
    command = " ".join(words)
    if trials:
        print(f"wrote {record('arrival-cold', [t['first admission'] for t in trials], command)}")
    if warm:
        print(f"wrote {record('arrival-warm', warm, command)}")


if __name__ == "__main__":
    sys.exit(interruptible(main))  # Ctrl-C or SIGTERM: its services stopped
