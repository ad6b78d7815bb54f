"""Smoke test through the real Airflow components.

A fresh AIRFLOW_HOME and metadata database; scheduler, triggerer, DAG processor and API server
started together in one new process group (LocalExecutor, parallelism 8); the simulator in
this process; a backlog in the task store. The drain DAG (``dags/llm_router_smoke.py``, four
mapped deferrable ``SolveTaskOperator`` instances) is unpaused and triggered with the CLI and
must drain the backlog with zero 429s while the triggers of at least four mapped instances
run at the same time in the real triggerer. Then the whole group is stopped with one SIGTERM.

Everything it creates is unique to the run and removed afterwards, pass or fail: the metadata
database ``llmr_smoke_<id>``, the store schema of the same name in the test database, the
router namespace's Redis keys, the processes. ``LLMR_SMOKE_HOME=<dir>`` keeps AIRFLOW_HOME
(component logs, task and trigger logs, ``stop.log``) in ``<dir>`` for a look afterwards.

Measured on the 2-core dev machine (shared, lightly loaded): ~45-60 s in all: ``db migrate``
~3.5-4.5 s, the stack up (API server answering) ~9-19 s, the two CLI calls ~3-7 s, the run
~18-20 s, the stop ~4-12 s (the triggerer waits up to ~10 s for its trigger runner).
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg import sql

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.store import TaskStore
from llm_router_devkit.simulator import SimulatorProfile, SimulatorServer
from llm_router_devkit.stack import STARTUP_TIMEOUT_S, AirflowStack, PgServer, wait_for
from tests.conftest import POSTGRES_DSN, REDIS_URL, delete_namespace

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]  # startup waits up to 2 x 180 s

DAG_ID = "llm_router_smoke"
DAGS_FOLDER = Path(__file__).parent / "dags"
MAPPED = 4  # instances in the DAG file (one per chunk size)
BACKLOG = 600
#: Provider seconds per wall-clock second. At 15 a call lasts ~0.1 s (flash-mini) to ~4 s
#: (reasoner-large, at most 8 s) and the window is 4 s. With 4 x 50 prompts in flight the
#: backlog lasts several seconds, far longer than the ~1 s between the triggerer picking up
#: the first and the last trigger, so all four have work at once; and each trigger runs far
#: longer than the scheduler takes to see the deferring worker exit (see
#: AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL in stack.py). Measured: each trigger ~6-9 s, four
#: of them at once for ~5-7 s; the run ~18-20 s.
TIME_SCALE = 15.0
UNLIMITED = 1_000_000  # a profile's null limit, as a router quota
#: Bounded waits (seconds).
RUN_TIMEOUT_S = 90.0


@dataclass
class Names:
    """Everything this run creates, unique per run so parallel runs never meet."""

    suffix: str

    @property
    def database(self) -> str:
        return f"llmr_smoke_{self.suffix}"

    @property
    def schema(self) -> str:
        return f"llmr_smoke_{self.suffix}"

    @property
    def namespace(self) -> str:
        return f"smoke-{self.suffix}"

    @property
    def run_id(self) -> str:
        return f"smoke_{self.suffix}"


def set_quotas(router: RouterClient, profile: SimulatorProfile) -> None:
    """The router's quotas are the provider's limits, on the simulator's (scaled) window."""
    window_s = profile.window_s / profile.time_scale
    for model in profile.models:
        router.set_quota(model.name, {
            "rpm": model.rpm or UNLIMITED,
            "tpm": model.tpm or UNLIMITED,
            "max_concurrency": model.max_concurrency or UNLIMITED,
            "window_s": window_s,
            "expected_output_tokens": model.output_tokens_mean,
        })


def new_stack(names: Names, pg: PgServer, cleanup: ExitStack, home: Path, dags_folder: Path,
              backend_url: str, *, router_extra: dict[str, object] | None = None,
              extra_env: dict[str, str] | None = None) -> AirflowStack:
    """The run's metadata database (dropped by ``cleanup``) and an Airflow stack on it whose
    connections point at the shared Redis (the run's namespace), PostgreSQL and the
    backend; the DAGs read the store schema from ``LLMR_SMOKE_STORE_SCHEMA``."""
    pg.create_database(names.database)
    cleanup.callback(pg.drop_database, names.database)
    return AirflowStack(
        home=home,
        dags_folder=dags_folder,
        sql_alchemy_conn=pg.sqlalchemy_url(names.database),
        connections={
            "llm_router_default": {"conn_type": "llm_router", "host": "127.0.0.1",
                                   "port": 6379,
                                   "extra": {"namespace": names.namespace,
                                             **(router_extra or {})}},
            "postgres_default": pg.airflow_conn(),
            "models_backend_default": {"conn_type": "models_backend", "host": backend_url},
        },
        extra_env={"LLMR_SMOKE_STORE_SCHEMA": names.schema, **(extra_env or {})},
    )


# -- evidence of overlap ------------------------------------------------------------------

_TRIGGER_ID = re.compile(r"\(ID (\d+)\)")


@dataclass
class TriggerRun:
    map_index: int
    start: float | None = None  # epoch seconds of "trigger ... starting"
    end: float | None = None  # epoch seconds of "trigger completed"


class TriggerLogs:
    """The *triggerer's* own lines around every trigger it runs: ``trigger <name> (ID n)
    starting`` and ``trigger completed``, written (with timestamps) to
    ``<task log>.trigger.<job>.log`` beside each task instance's log.

    Airflow reopens that file with mode "w" for each new trigger of the same task instance,
    so only the last trigger of each map index survives the run: :meth:`collect` is called at
    every poll while the run goes on (a trigger lasts seconds, and the next trigger of the same
    instance starts only after a worker resumed it, so every trigger's lines are seen) and
    keeps every trigger it has seen, keyed by trigger id.
    """

    def __init__(self, logs: Path, run_id: str) -> None:
        self.base = logs / f"dag_id={DAG_ID}" / f"run_id={run_id}" / "task_id=solve"
        self.runs: dict[int, TriggerRun] = {}

    def collect(self) -> None:
        for path in self.base.glob("map_index=*/*.trigger.*.log"):
            map_index = int(path.parent.name.split("=", 1)[1])
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                self._line(map_index, line)

    def _line(self, map_index: int, line: str) -> None:
        try:
            doc = json.loads(line)
        except ValueError:
            return  # a line being written
        event = str(doc.get("event", ""))
        name = str(doc.get("name", "")) or event
        match = _TRIGGER_ID.search(name)
        if match is None or "timestamp" not in doc:
            return
        stamp = datetime.fromisoformat(str(doc["timestamp"]).replace("Z", "+00:00")).timestamp()
        run = self.runs.setdefault(int(match.group(1)), TriggerRun(map_index))
        if event.startswith("trigger ") and event.endswith(" starting"):
            run.start = stamp
        elif event == "trigger completed":
            run.end = stamp

    def intervals(self) -> dict[int, list[tuple[float, float]]]:
        """Per map index, the [start, end] of each trigger seen whole."""
        out: dict[int, list[tuple[float, float]]] = {}
        for run in self.runs.values():
            if run.start is not None and run.end is not None:
                out.setdefault(run.map_index, []).append((run.start, run.end))
        return {k: sorted(v) for k, v in sorted(out.items())}


def overlap(intervals: dict[int, list[tuple[float, float]]], width: int) -> tuple[int, float]:
    """Sweep the intervals: the most map indexes in a trigger at one same instant, and for how
    many seconds in all at least ``width`` of them were."""
    events = sorted(
        ((stamp, delta, map_index)
         for map_index, spans in intervals.items()
         for start, end in spans
         for stamp, delta in ((start, 1), (end, -1))),
        key=lambda e: (e[0], e[1]),  # at one same instant, an end before a start
    )
    active: dict[int, int] = {}
    best, wide_s, last = 0, 0.0, None
    for stamp, delta, map_index in events:
        if last is not None and sum(1 for n in active.values() if n > 0) >= width:
            wide_s += stamp - last
        active[map_index] = active.get(map_index, 0) + delta
        best = max(best, sum(1 for n in active.values() if n > 0))
        last = stamp
    return best, wide_s


# -- the test -----------------------------------------------------------------------------


def test_drain_dag_on_the_real_stack(tmp_path: Path) -> None:
    measured: dict[str, float] = {}
    t0 = time.monotonic()
    names = Names(uuid.uuid4().hex[:10])
    pg = PgServer.from_dsn(POSTGRES_DSN)
    home = Path(os.environ.get("LLMR_SMOKE_HOME") or tmp_path / "airflow")
    home.mkdir(parents=True, exist_ok=True)
    profile = SimulatorProfile.default(time_scale=TIME_SCALE, seed=7)

    with ExitStack() as cleanup:  # every step runs, in reverse order, whatever fails
        cleanup.callback(lambda: print(  # the measurements, for the record
            "smoke:", {k: round(v, 2) for k, v in measured.items()},
            f"total {time.monotonic() - t0:.1f} s"))
        cleanup.callback(delete_namespace, names.namespace)
        cleanup.callback(pg.drop_schema, names.schema)
        store = TaskStore(POSTGRES_DSN, schema=names.schema)
        cleanup.callback(store.close)
        router = RouterClient.from_url(REDIS_URL, RouterSettings(namespace=names.namespace))
        cleanup.callback(router.close)
        sim = SimulatorServer(profile).start()
        cleanup.callback(sim.stop)

        set_quotas(router, profile)
        store.migrate()
        store.enqueue([f"Smoke prompt {i}: summarise record {i} of the backlog in one line."
                       for i in range(BACKLOG)])
        measured["seed_s"] = time.monotonic() - t0
        stack = new_stack(names, pg, cleanup, home, DAGS_FOLDER, sim.url)
        measured["setup_s"] = time.monotonic() - t0

        mark = time.monotonic()
        stack.cli("db", "migrate", timeout_s=60)
        measured["db_migrate_s"] = time.monotonic() - mark

        mark = time.monotonic()
        cleanup.callback(stack.stop)  # idempotent: a no-op after the stop asserted below
        stack.start()
        wait_for("the API server", lambda: stack.alive() and stack.token(), STARTUP_TIMEOUT_S)
        measured["api_up_s"] = time.monotonic() - mark
        wait_for(f"the DAG processor to parse {DAG_ID}",
                 lambda: dag_parsed(stack), STARTUP_TIMEOUT_S, 0.5)
        measured["dag_parsed_s"] = time.monotonic() - mark

        mark = time.monotonic()
        # Both at once (each CLI call costs ~3-4 s of Airflow start-up here): a run triggered
        # while the DAG is still paused just waits, queued, for the unpause.
        with ThreadPoolExecutor(2) as pool:
            calls = [pool.submit(stack.cli, "dags", "unpause", DAG_ID),
                     pool.submit(stack.cli, "dags", "trigger", DAG_ID, "--run-id", names.run_id)]
            for call in calls:
                call.result()
        measured["unpause_trigger_cli_s"] = time.monotonic() - mark

        mark = time.monotonic()
        trigger_logs = TriggerLogs(home / "logs", names.run_id)
        samples = watch_run(stack, store, names.run_id, trigger_logs)
        measured["run_s"] = time.monotonic() - mark
        state = samples[-1].run_state
        assert state == "success", \
            f"the run ended {state}\n{task_errors(home / 'logs')}\n{stack.read_logs()}"

        # The backlog is drained, every task solved (the store's own counts).
        counts = store.counts()
        assert counts["solved"] == BACKLOG, counts
        assert counts["pending"] == counts["claimed"] == counts["dead"] == 0, counts

        # The backend, not the router, says no limit was hit.
        stats = httpx.get(f"{sim.url}/stats").json()
        assert stats["totals"]["rejected_429"] == 0, stats["totals"]
        assert stats["totals"]["violations"] == 0, stats["totals"]
        assert stats["totals"]["completed"] >= BACKLOG, stats["totals"]

        # Every mapped instance succeeded.
        tis = stack.api("GET", f"/dags/{DAG_ID}/dagRuns/{names.run_id}/taskInstances").json()
        done = sorted(ti["map_index"] for ti in tis["task_instances"]
                      if ti["task_id"] == "solve" and ti["state"] == "success")
        assert done == list(range(MAPPED)), tis

        check_overlap(trigger_logs, samples, measured)

        # One SIGTERM to the group stops everything; nothing needs SIGKILL, nothing is left.
        # If something does, the report says what each leftover was doing before SIGKILL
        # (kernel state, py-spy stacks, the logs' last lines; also in stop.log).
        report = stack.stop()
        measured["stop_s"] = report.term_s
        assert not report.left, f"processes survived SIGKILL:\n{report}"
        if report.killed and report.airflow_race:
            # Only when the stacks show exactly Airflow's LocalExecutor shutdown race
            # (stack.local_executor_race): a rare race in Airflow's own SIGTERM handling that
            # no caller can avoid; reported as XFAIL, never passed silently. Anything else
            # left after SIGTERM fails below.
            pytest.xfail(f"needed SIGKILL after {report.term_s:.1f} s: "
                         f"{report.airflow_race}\n{report}")
        assert not report.killed, f"needed SIGKILL after {report.term_s:.1f} s:\n{report}"
        assert not stack.members()


def task_errors(logs: Path, dag_id: str = DAG_ID) -> str:
    """The error lines of every task and trigger log of the DAG, for a failure message."""
    out = []
    for path in sorted((logs / f"dag_id={dag_id}").rglob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if doc.get("level") in ("error", "critical"):
                detail = doc.get("error_detail") or doc.get("exception") or ""
                out.append(f"{path.relative_to(logs)}: {doc.get('timestamp')} "
                           f"{doc.get('event')} {json.dumps(detail)[:1500]}")
    return "\n".join(out) or "(no error lines in the task logs)"


def dag_parsed(stack: AirflowStack, dag_id: str = DAG_ID) -> bool:
    stack.alive()
    errors = stack.api("GET", "/importErrors").json()
    if errors.get("total_entries"):
        raise AssertionError(f"DAG import errors: {errors}")
    return stack.api("GET", f"/dags/{dag_id}").status_code == 200


@dataclass
class Sample:
    at: float  # epoch seconds
    run_state: str | None
    deferred: frozenset[int]  # map indexes deferred with their trigger taken by a triggerer
    claiming: frozenset[int]  # map indexes holding claims in the task store


def watch_run(stack: AirflowStack, store: TaskStore, run_id: str,
              trigger_logs: TriggerLogs) -> list[Sample]:
    """Poll the run until it ends (bounded). At each poll, sample which mapped instances are
    deferred with a triggerer job on their trigger (Airflow's REST API) and which hold claims
    (the task store), and collect the triggerer's log lines."""
    samples: list[Sample] = []
    query = sql.SQL("SELECT DISTINCT claimed_by FROM {}.tasks WHERE status = 'claimed'") \
        .format(sql.Identifier(store.schema))

    def poll() -> Sample | None:
        stack.alive()
        trigger_logs.collect()
        run = stack.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}").json()
        tis = stack.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances").json()
        deferred = frozenset(ti["map_index"] for ti in tis.get("task_instances", [])
                             if ti["state"] == "deferred" and ti.get("triggerer_job"))
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            workers = [row[0] for row in conn.execute(query)]
        # worker id: "<dag>.<task>.<run>.<map_index>.try<n>" (see SolveTaskOperator)
        claiming = frozenset(int(w.rsplit(".", 2)[-2]) for w in workers if w)
        sample = Sample(time.time(), run.get("state"), deferred, claiming)
        samples.append(sample)
        return sample if sample.run_state in ("success", "failed") else None

    wait_for(f"run {run_id} to end", poll, RUN_TIMEOUT_S, 0.3)
    trigger_logs.collect()
    return samples


def check_overlap(trigger_logs: TriggerLogs, samples: list[Sample],
                  measured: dict[str, float]) -> None:
    """At least MAPPED mapped instances had their triggers running at one same instant.

    The evidence comes from Airflow, not from the code under test:

    1. the triggerer's own "trigger ... starting" / "trigger completed" lines give, per map
       index, the intervals its triggers ran in the triggerer; a sweep over them gives the
       most map indexes running a trigger at one instant;
    2. cross-check: Airflow's task-instance states sampled through the REST API during the
       run; some sample must show >= MAPPED instances deferred with their trigger held by a
       triggerer job at once.

    The task store cannot show it after the fact (a solved row's claim, ``claimed_by``
    included, is cleared), and claims sampled during the run (``claiming_peak``, reported
    only) span the worker's claim and write-back too, not just the trigger.
    """
    intervals = trigger_logs.intervals()
    widest, wide_s = overlap(intervals, MAPPED)
    deferred_peak = max((len(s.deferred) for s in samples), default=0)
    measured["trigger_runs"] = sum(len(v) for v in intervals.values())
    measured["trigger_overlap"] = widest
    measured["overlap_s"] = wide_s  # seconds with >= MAPPED map indexes in a trigger
    measured["deferred_peak"] = deferred_peak
    measured["deferred_wide_samples"] = sum(1 for s in samples if len(s.deferred) >= MAPPED)
    measured["samples"] = len(samples)
    measured["claiming_peak"] = max((len(s.claiming) for s in samples), default=0)
    first = min((a for spans in intervals.values() for a, _ in spans), default=0.0)
    print("smoke: trigger runs per map index, s from the first start:", {
        m: [(round(a - first, 2), round(b - first, 2)) for a, b in spans]
        for m, spans in intervals.items()})
    assert widest >= MAPPED, f"triggers overlapped only {widest}-wide: {intervals}"
    assert deferred_peak >= MAPPED, [sorted(s.deferred) for s in samples]
