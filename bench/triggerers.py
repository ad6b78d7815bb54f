"""Triggerers and workers: W1 drained by mapped solvers through a real Airflow stack with one
triggerer, with two, and as async tasks in the workers; on demand, not in CI.

    python -m bench.triggerers                      # the four configurations, ~7 min
    python -m bench.triggerers --configs deferrable-2 --tasks 500 --no-yardstick

Each configuration gets a fresh stack (``llm_router_devkit.stack.AirflowStack``: scheduler,
triggerer, DAG processor, API server, LocalExecutor with parallelism fan-out + 4), a fresh
simulator process with W1's profile and time scale (as ``bench/e2e``), a fresh router
namespace with the e2e quotas (``router_quotas``: the provider's limits) and a fresh
task-store schema holding W1's prompts. The DAG (``bench/dags/llm_router_scale.py``) maps
``--fan-out`` solvers of ``--max-in-flight`` calls each:

- ``deferrable-1``: ``SolveTaskOperator``, each solver a ``DrainTrigger``, one triggerer;
- ``deferrable-2``: the same with a second ``airflow triggerer`` on the same metadata
  database (``AirflowStack.add_triggerer``), running before the DAG is triggered;
- ``deferrable-2-split``: the same with each triggerer's ``[triggerer] capacity`` set to
  half the fan-out (rounded up), so the triggers must split between the two (with the
  default capacity of 1,000, whichever triggerer polls first takes every trigger deferred
  since its last poll);
- ``deferrable-2-spread``: two triggerers, each able to hold every trigger (``capacity`` =
  the fan-out: one takes over the other's drains if it dies) and taking at most one new
  trigger per loop (``max_trigger_to_select_per_loop`` 1), so triggers deferred together
  spread over the triggerers as they poll in turn;
- ``async``: ``SolveTaskAsyncOperator``, each solver an async task in a worker slot.

With ``--fast M``, the CPU-bound regime in place of W1: M models of the simulator answering
in ~5 ms with no provider limits (``bench/solver_cpu.py``'s profile), quotas far above the
load, and ``--tasks`` prompts of 400 characters; what binds is the CPU of the solvers'
processes, so one triggerer against two (``deferrable-1``, ``deferrable-2-split``) checks
the projection of docs/scale.md ("Solver CPU and the ceiling").

With ``--kill-triggerer-at F`` (two-triggerer configurations), the second triggerer gets
SIGKILL once a share F of the tasks is solved, and the run times how soon the survivor
runs its drains (``bench/triggerer_kill.py``) and the longest stretch without an answer
after the kill.

Per configuration: makespan (the first call at the backend -> the last answer in the store,
as in ``bench/e2e``) and trigger -> last answer; tasks solved; backend calls, 429s and
window violations from the simulator's own ``/stats``; the triggers per triggerer job (the
metadata DB's ``trigger`` table, polled during the run, since rows go once a trigger ends);
CPU seconds per component process tree from ``/proc`` between the trigger and the end
(workers: the scheduler's LocalExecutor children and their task processes), and the whole
machine's. With all of W1 (``--tasks 2000``), each makespan is set against W1's LP bound and
reference schedule (``bench/e2e/yardstick.py``, ~1-2 min to compute; ``--no-yardstick``).
Results: ``bench/out/<stamp>-triggerers/``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import psycopg

from airflow_llm_router.engine import RouterClient, RouterSettings
from airflow_llm_router.store import TaskStore
from bench.common import OUT_DIR, enqueue_synthetic, results_dir
from bench.e2e.workloads import build
from bench.solver_cpu import roomy_quotas, sim_profile
from bench.triggerer_kill import TriggererKill
from llm_router_devkit.demo.airflow_env import postgres_connection, router_connection
from llm_router_devkit.demo.router_quotas import router_quotas
from llm_router_devkit.demo.run import drop_namespace
from llm_router_devkit.demo.seed import seed_store
from llm_router_devkit.interrupt import interrupted, sigterm_as_interrupt
from llm_router_devkit.product_path import first_arrival_s
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.server import SimulatorProcess
from llm_router_devkit.stack import AirflowStack, PgServer, wait_for
from llm_router_devkit.stack_processes import descendants

ROOT = Path(__file__).resolve().parents[1]
DAGS_FOLDER = ROOT / "bench" / "dags"
#: configuration -> (DAG mode, triggerers, placement: None (Airflow's defaults), "split"
#: (each triggerer's capacity capped to half the fan-out: the triggers must split between
#: the two) or "spread" (capacity the whole fan-out, one new trigger per loop))
CONFIGS: dict[str, tuple[str, int, str | None]] = {
    "deferrable-1": ("deferrable", 1, None), "deferrable-2": ("deferrable", 2, None),
    "deferrable-2-split": ("deferrable", 2, "split"),
    "deferrable-2-spread": ("deferrable", 2, "spread"), "async": ("async", 1, None)}
POLL_S = 0.5
#: a loaded machine (load 20+ on 2 cores) takes over 2 min to start an API server
STARTUP_TIMEOUT_S = 300.0
SETTLE_S = 60.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


def say(message: str) -> None:
    print(message, flush=True)


# -- CPU from /proc -----------------------------------------------------------------------


def _times(pid: int) -> tuple[float, float]:
    """(own, own + reaped children) CPU seconds of ``pid``; zeros if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0, 0.0
    f = stat[stat.rindex(")") + 2:].split()
    own = (int(f[11]) + int(f[12])) / CLK_TCK
    return own, own + (int(f[13]) + int(f[14])) / CLK_TCK


def _tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and every live process below it, reaped children included."""
    return sum(_times(pid)[1] for pid in [root, *descendants(root)])


def _machine_busy() -> float:
    """CPU seconds the whole machine spent busy (every core), from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


def cpu_snapshot(stack: AirflowStack, names: Sequence[str], sim_pid: int | None
                 ) -> dict[str, float]:
    """CPU seconds so far: the scheduler itself, its workers (LocalExecutor children and
    their task processes), each other component's tree, the simulator, the machine."""
    out: dict[str, float] = {}
    for name in names:
        pid = stack.component_pid(name)
        if name == "scheduler":
            own = _times(pid)[0]
            out["scheduler"] = own
            out["workers"] = _tree_cpu(pid) - own
        else:
            out[name] = _tree_cpu(pid)
    if sim_pid is not None:
        out["simulator"] = _tree_cpu(sim_pid)
    out["machine"] = _machine_busy()
    return out


# -- the metadata DB ----------------------------------------------------------------------


def triggerer_jobs(meta_dsn: str) -> list[int]:
    query = ("SELECT id FROM job WHERE job_type = 'TriggererJob' AND state = 'running' "
             "AND latest_heartbeat > now() - interval '30 seconds' ORDER BY id")
    with psycopg.connect(meta_dsn, autocommit=True) as conn:
        return [int(r[0]) for r in conn.execute(query)]


class TriggerSpread:
    """Which triggerer job held each trigger, polled from the ``trigger`` table (a row is
    deleted once its trigger has fired and no task instance refers to it)."""

    def __init__(self, meta_dsn: str) -> None:
        self.conn = psycopg.connect(meta_dsn, autocommit=True)
        self.held: dict[int, set[int]] = {}  # trigger id -> triggerer job ids seen on it
        self.map_index: dict[int, int] = {}

    def poll(self) -> None:
        rows = self.conn.execute(
            "SELECT t.id, t.triggerer_id, ti.map_index FROM trigger t "
            "LEFT JOIN task_instance ti ON ti.trigger_id = t.id").fetchall()
        for trigger_id, triggerer_id, map_index in rows:
            held = self.held.setdefault(int(trigger_id), set())
            if triggerer_id is not None:
                held.add(int(triggerer_id))
            if map_index is not None:
                self.map_index[int(trigger_id)] = int(map_index)

    def summary(self, jobs: Sequence[int]) -> dict[str, Any]:
        per_job: dict[str, int] = {str(job): 0 for job in jobs}
        for holders in self.held.values():
            for job in holders:
                per_job[str(job)] = per_job.get(str(job), 0) + 1
        return {"triggers": len(self.held), "per_triggerer_job": per_job,
                "moved": sum(1 for jobs in self.held.values() if len(jobs) > 1),
                "never_assigned_seen": sum(1 for jobs in self.held.values() if not jobs),
                "by_trigger": {str(t): {"jobs": sorted(j), "map_index": self.map_index.get(t)}
                               for t, j in sorted(self.held.items())}}

    def close(self) -> None:
        self.conn.close()


# -- one configuration --------------------------------------------------------------------


def _stack(opts: argparse.Namespace, cleanup: ExitStack, pg: PgServer, database: str,
           namespace: str, schema: str, sim_url: str, capacity: int | None,
           per_loop: int | None) -> AirflowStack:
    pg.create_database(database)
    cleanup.callback(pg.drop_database, database)
    home = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="llmr-trig-")))
    parallelism = opts.parallelism or opts.fan_out + 4
    return AirflowStack(
        home=home, dags_folder=DAGS_FOLDER, sql_alchemy_conn=pg.sqlalchemy_url(database),
        parallelism=parallelism,
        connections={
            "llm_router_default": router_connection(opts.redis_url, namespace),
            "postgres_default": postgres_connection(opts.postgres_dsn),
            "models_backend_default": {"conn_type": "models_backend", "host": sim_url,
                                       "extra": {"timeout_s": 300}},
        },
        extra_env={"AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(parallelism),
                   "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
                   "LLMR_SCALE_FAN_OUT": str(opts.fan_out),
                   "LLMR_SCALE_MAX_IN_FLIGHT": str(opts.max_in_flight),
                   "LLMR_SCALE_CLAIM_BATCH": str(opts.claim_batch),
                   "LLMR_SCALE_STORE_SCHEMA": schema,
                   **({"AIRFLOW__TRIGGERER__CAPACITY": str(capacity)} if capacity else {}),
                   **({"AIRFLOW__TRIGGERER__MAX_TRIGGER_TO_SELECT_PER_LOOP": str(per_loop)}
                      if per_loop else {})},
    )


def _watch(stack: AirflowStack, store: TaskStore, spread: TriggerSpread | None, dag_id: str,
           run_id: str, deadline_s: float, kill: TriggererKill | None = None) -> str:
    """Poll until the backlog is empty and the run ended (or settled), or the deadline."""
    deadline = time.monotonic() + deadline_s
    done_at: float | None = None
    last_say = 0.0
    while True:
        stack.alive()
        if spread is not None:
            spread.poll()
        counts = store.counts()
        if kill is not None:
            kill.poll(counts["solved"])
        try:
            state = str(stack.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}").json()
                        .get("state"))
        except httpx.TimeoutException:  # a loaded machine's API server: ask at next poll
            state = "unknown"
        if time.monotonic() - last_say > 5:
            last_say = time.monotonic()
            say(f"  run {state:8} | solved {counts['solved']} pending {counts['pending']} "
                f"claimed {counts['claimed']} dead {counts['dead']}")
        left = counts["pending"] + counts["claimed"]
        finished = state in ("success", "failed")
        if left == 0:
            done_at = done_at or time.monotonic()
            if finished or time.monotonic() - done_at > SETTLE_S:
                return "done" if state == "success" else f"run {state}"
        elif finished:
            return f"run {state} with {left} left"
        if time.monotonic() >= deadline:
            return "deadline"
        time.sleep(POLL_S)


def _store_times(dsn: str, schema: str) -> dict[str, Any]:
    query = (f'SELECT count(*) FILTER (WHERE status = \'solved\'), '
             f'count(*) FILTER (WHERE status = \'dead\'), extract(epoch FROM max(solved_at)), '
             f'percentile_cont(ARRAY[0.1, 0.9]) WITHIN GROUP (ORDER BY extract(epoch FROM '
             f'solved_at)) FROM "{schema}".tasks')
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    solved, dead, last, (p10, p90) = row
    return {"solved": int(solved), "dead": int(dead),
            "last_solved": float(last) if last is not None else None,
            "p10_solved": float(p10) if p10 is not None else None,
            "p90_solved": float(p90) if p90 is not None else None}


def _longest_gap_after(dsn: str, schema: str, after: float | None) -> float | None:
    """The longest stretch without an answer from ``after`` (epoch s) to the last one."""
    if after is None:
        return None
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f'SELECT extract(epoch FROM solved_at) FROM "{schema}".tasks '
                            "WHERE solved_at > to_timestamp(%s) ORDER BY solved_at",
                            (after,)).fetchall()
    times = [after, *(float(t) for (t,) in rows)]
    return max((b - a for a, b in pairwise(times)), default=None)


def run_config(name: str, opts: argparse.Namespace) -> dict[str, Any]:
    mode, triggerers, placement = CONFIGS[name]
    capacity = {"split": -(-opts.fan_out // 2), "spread": opts.fan_out}.get(placement or "")
    per_loop = 1 if placement == "spread" else None
    dag_id = f"llm_router_scale_{mode}"
    if opts.fast:
        profile = sim_profile(opts.fast)
        tasks = None
    else:
        profile = SimulatorProfile.default(time_scale=opts.time_scale, seed=opts.seed)
        tasks = build("W1", opts.seed, [m.name for m in profile.models]).initial[:opts.tasks]
    n_tasks = len(tasks) if tasks is not None else opts.tasks
    suffix = uuid.uuid4().hex[:10]
    namespace, schema = f"trig-{suffix}", f"llmr_trig_{suffix}"
    database = schema
    pg = PgServer.from_dsn(opts.postgres_dsn)
    t0 = time.monotonic()
    with ExitStack() as cleanup:
        sim = SimulatorProcess(profile).start()
        cleanup.callback(sim.stop)
        router = RouterClient.from_url(opts.redis_url, RouterSettings(namespace=namespace))
        cleanup.callback(router.close)
        cleanup.callback(drop_namespace, router, namespace)
        if opts.fast:
            roomy_quotas(cleanup, opts.redis_url, namespace, profile)
        else:
            for model, quota in router_quotas(profile).items():
                router.set_quota(model, quota)
        cleanup.callback(pg.drop_schema, schema)
        store = TaskStore(opts.postgres_dsn, schema=schema)
        cleanup.callback(store.close)
        store.migrate()
        if tasks is not None:
            seed_store(store, tasks)
        else:
            enqueue_synthetic(store, n_tasks, 400)
        stack = _stack(opts, cleanup, pg, database, namespace, schema, sim.url, capacity,
                       per_loop)
        stack.cli("db", "migrate", timeout_s=180)
        cleanup.callback(stack.stop)
        stack.start()
        components = ["scheduler", "triggerer", "dag-processor", "api-server"]
        if triggerers > 1:
            stack.add_triggerer()
            components.insert(2, "triggerer-2")
        meta = pg.dsn(database)
        wait_for("the API server", lambda: stack.alive() and stack.token(), STARTUP_TIMEOUT_S)
        wait_for(f"{triggerers} running triggerer job(s)",
                 lambda: len(triggerer_jobs(meta)) == triggerers, STARTUP_TIMEOUT_S, 0.5)
        wait_for(f"the DAG processor to parse {dag_id}",
                 lambda: stack.alive() and stack.api("GET", f"/dags/{dag_id}").status_code
                 == 200, STARTUP_TIMEOUT_S, 0.5)
        stack.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()
        jobs = triggerer_jobs(meta)
        say(f"  stack up in {time.monotonic() - t0:.0f} s; triggerer jobs {jobs}")
        spread = TriggerSpread(meta) if mode == "deferrable" else None
        if spread is not None:
            cleanup.callback(spread.close)
        kill = None
        if opts.kill_triggerer_at is not None and triggerers > 1:
            kill = TriggererKill(stack, meta, "triggerer-2",
                                 int(opts.kill_triggerer_at * n_tasks))
            cleanup.callback(kill.close)
        sim_pid = getattr(getattr(sim, "_proc", None), "pid", None)
        httpx.post(f"{sim.url}/stats/reset", timeout=10).raise_for_status()
        reset_epoch = time.time()
        cpu0 = cpu_snapshot(stack, components, sim_pid)
        run_id = f"trig_{suffix}"
        stack.api("POST", f"/dags/{dag_id}/dagRuns", json={
            "dag_run_id": run_id, "logical_date": None}).raise_for_status()
        triggered = time.time()
        outcome = _watch(stack, store, spread, dag_id, run_id, opts.deadline_min * 60, kill)
        ended = time.time()
        killed = kill.summary() if kill is not None else None
        # a killed triggerer's CPU is not known past its kill: left out
        cpu1 = cpu_snapshot(stack, [c for c in components if c not in stack.down], sim_pid)
        stats = httpx.get(f"{sim.url}/stats", timeout=30).json()
        timeline = httpx.get(f"{sim.url}/timeline", timeout=60,
                             params={"bucket_s": profile.scaled_window_s / 100}).json()
        rows = _store_times(opts.postgres_dsn, schema)
        if killed is not None:
            killed["longest_gap_after_kill_s"] = _longest_gap_after(
                opts.postgres_dsn, schema, killed["killed_at"])
            say(f"  kill: {killed}")
        first = first_arrival_s(timeline)
        load = os.getloadavg()
        stopped = stack.stop()
        say(f"  {outcome}; stack stopped in {stopped.term_s:.1f} s")
    first_epoch = reset_epoch + first if first is not None else None
    last = rows["last_solved"]
    span = (rows["p90_solved"] or 0) - (rows["p10_solved"] or 0)
    return {
        "config": name, "mode": mode, "triggerers": triggerers, "outcome": outcome,
        "tasks": n_tasks, "fast_models": opts.fast, "fan_out": opts.fan_out,
        "max_in_flight": opts.max_in_flight,
        "time_scale": opts.time_scale, "window_s": profile.scaled_window_s,
        "solved": rows["solved"], "dead": rows["dead"],
        "makespan_s": (last - first_epoch) if last and first_epoch else None,
        "trigger_to_first_call_s": (first_epoch - triggered) if first_epoch else None,
        "trigger_to_last_answer_s": (last - triggered) if last else None,
        "steady_rate": 0.8 * rows["solved"] / span if span > 0 else None,
        "run_wall_s": ended - triggered,
        "backend": {k: stats["totals"].get(k) for k in
                    ("requests", "completed", "rejected_429", "violations")},
        "cpu_s": {k: round(cpu1[k] - cpu0.get(k, 0.0), 2) for k in cpu1},
        "triggerer_capacity": capacity,
        "max_trigger_to_select_per_loop": per_loop,
        "spread": spread.summary(jobs) if spread is not None else None,
        "kill": killed,
        "load_average_at_end": load,
    }


# -- the report ---------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def table(rows: Sequence[dict[str, Any]], yard: dict[str, float] | None) -> str:
    head = ("| configuration | solved | makespan s | trigger to last answer s | steady "
            "answers/s | backend calls | 429s | window violations | triggers per "
            "triggerer job | CPU s: triggerer(s) | CPU s: workers | CPU s: scheduler | "
            "CPU s: API server | CPU s: simulator | machine busy (cores) |")
    if yard:
        head += " % of reference speed | % of LP bound speed |"
    lines = [head, "|" + "---|" * head.count(" |")]
    for r in rows:
        cpu, b = r["cpu_s"], r["backend"]
        trig = " + ".join(f"{cpu[k]:.1f}" for k in ("triggerer", "triggerer-2") if k in cpu)
        spread = "—" if r["spread"] is None else " / ".join(
            str(n) for n in r["spread"]["per_triggerer_job"].values()) or "0"
        line = (f"| {r['config']} | {r['solved']}/{r['tasks']} | {_fmt(r['makespan_s'])} | "
                f"{_fmt(r['trigger_to_last_answer_s'])} | {_fmt(r['steady_rate'])} | "
                f"{b['requests']} | {b['rejected_429']} | {b['violations']} | {spread} | "
                f"{trig} | {cpu['workers']:.1f} | {cpu['scheduler']:.1f} | "
                f"{cpu['api-server']:.1f} | {cpu.get('simulator', 0):.1f} | "
                f"{cpu['machine'] / r['run_wall_s']:.2f} of {os.cpu_count()} |")
        if yard:
            done = r["solved"] == r["tasks"] and r["makespan_s"]
            line += "".join(f" {yard[k] / r['makespan_s']:.0%} |" if done else " — |"
                            for k in ("reference_s", "lp_bound_s"))
        lines.append(line)
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.triggerers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--tasks", type=int, default=2000, help="the first N of W1's 2,000 "
                   "(with --fast: prompts, up to 1,000,000)")
    p.add_argument("--fast", type=int, default=0, metavar="MODELS",
                   help="the CPU-bound regime: this many fast models, roomy quotas")
    p.add_argument("--fan-out", type=int, default=4, help="mapped solvers")
    p.add_argument("--max-in-flight", type=int, default=50, help="calls per solver")
    p.add_argument("--claim-batch", type=int, default=50)
    p.add_argument("--time-scale", type=float, default=3.0, help="as bench/e2e (default 3)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--parallelism", type=int, default=0,
                   help="Airflow core parallelism (default: fan-out + 4)")
    p.add_argument("--deadline-min", type=float, default=5.0, help="per run, from trigger")
    p.add_argument("--no-yardstick", action="store_true",
                   help="skip W1's LP bound and reference schedule (~1-2 min)")
    p.add_argument("--redis-url", default=os.environ.get("LLMR_TEST_REDIS_URL",
                                                         "redis://127.0.0.1:6379/0"))
    p.add_argument("--postgres-dsn", default=os.environ.get(
        "LLMR_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"))
    p.add_argument("--kill-triggerer-at", type=float, metavar="SHARE",
                   help="SIGKILL the second triggerer once this share of the tasks is "
                   "solved (0-1; configurations with two triggerers)")
    p.add_argument("--out", type=Path, default=OUT_DIR)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    most = 1_000_000 if opts.fast else 2000
    if not 1 <= opts.tasks <= most or opts.fan_out < 1 or opts.fast < 0:
        print(f"error: --tasks must be 1..{most:,}, --fan-out >= 1 and --fast >= 0",
              file=sys.stderr)
        return 2
    if opts.kill_triggerer_at is not None and not 0 < opts.kill_triggerer_at < 1:
        print("error: --kill-triggerer-at must be a share of the tasks between 0 and 1",
              file=sys.stderr)
        return 2
    out, command, started = results_dir(opts.out, "triggerers", "bench.triggerers", argv)
    rows: list[dict[str, Any]] = []
    try:
        with sigterm_as_interrupt():
            for name in opts.configs:
                what = f"over {opts.fast} fast models" if opts.fast else "W1 tasks"
                say(f"=== {name} ({opts.tasks} {what}, {opts.fan_out} solvers x "
                    f"{opts.max_in_flight}) ===")
                rows.append(run_config(name, opts))
                (out / "triggerers.json").write_text(json.dumps({"rows": rows}, indent=2))
            yard = None
            if not opts.no_yardstick and not opts.fast and opts.tasks == 2000:
                from bench.e2e.yardstick import measure

                say("computing W1's LP bound and reference schedule...")
                y = measure("W1", opts.seed, opts.time_scale)
                yard = {"lp_bound_s": y.lp_bound_s, "reference_s": y.reference_s,
                        "compute_s": y.seconds}
    except KeyboardInterrupt as err:  # Ctrl-C: 130, SIGTERM: 143
        return interrupted(err, "every stack was stopped")
    (out / "triggerers.json").write_text(json.dumps({"rows": rows, "yardstick": yard,
                                                     "started": started}, indent=2))
    text = [f"`{command}` (run {started}, {os.cpu_count()} CPUs)", "", table(rows, yard)]
    if yard:
        text.append(f"\nW1 LP bound {yard['lp_bound_s']:.1f} s, reference schedule "
                    f"{yard['reference_s']:.1f} s ({yard['compute_s']:.0f} s to compute).")
    for r in rows:
        if k := r.get("kill"):
            text.append(f"\n{r['config']}: {k['killed']} killed at {k['solved_at_kill']} "
                        f"solved, holding {k['triggers_orphaned']} of the triggers "
                        f"({k['triggers_at_kill']}); taken over after "
                        f"{_fmt(k['first_taken_over_s'])}-{_fmt(k['all_taken_over_s'])} s; "
                        f"longest stretch without an answer after the kill "
                        f"{_fmt(k['longest_gap_after_kill_s'])} s.")
    (out / "triggerers.md").write_text("\n".join(text) + "\n")
    say("\n".join(text))
    say(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
