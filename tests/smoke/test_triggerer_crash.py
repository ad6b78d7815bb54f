"""A real ``airflow triggerer`` killed (SIGKILL, with its trigger runner) in the middle of a
drain: Airflow re-runs the triggers on a new triggerer, and the promise still holds.

The stack is the smoke test's (``test_real_stack.py``: scheduler, triggerer, DAG processor
and API server, LocalExecutor, the simulator as the backend), with the DAG
``crash_dags/llm_router_crash.py``: two mapped deferrable drains whose claims last the
default ``claim_ttl_s`` (120 s).
Once a third of the backlog is solved, the triggerer and every process under it get SIGKILL
at once: no handler runs, no claim is handed back, no lease released, as on a machine that
dies. A new triggerer is started; once the dead one's heartbeat is older than
``triggerer_health_check_threshold`` (set to 5 s here), it takes the orphaned triggers and
re-runs them from their serialized arguments.

What must hold, read from the task store, the backend's own counters and Redis:

- every task ends solved, exactly once: the store counts ``solved == BACKLOG`` and nothing
  pending, claimed or dead, and the run succeeds;
- the re-run drains take back the claims the killed ones held (same worker id: the task
  instance try) at once, keeping their tokens and attempts: the run ends well before the
  claims could have expired, and no task was claimed twice (``attempts == 1``);
- repeated calls are bounded by the calls in flight at the kill: a call is repeated only if
  the killed process made it and its answer was not yet written to the store (answers are
  written in batches every ``flush_every_s``, so an answer may be back, its lease settled,
  and still unwritten). Hence **calls the backend completed - BACKLOG <= calls the backend
  had received by the kill - tasks the store had solved by then** (both read once the
  killed processes are gone, when neither can move; the figures are printed);
- no answer is overwritten by a stale claim: every write back is fenced by its claim token,
  and a task re-claimed after the dead drain's claim expired has a new token, so the count
  of answers the store accepted equals the tasks (``solved``), checked above, and no task
  has more than the one attempt its re-run needed (``attempts <= 2``);
- the dead process's slots free within the lease TTL: every lease live at the kill expires
  (its score in the model's live set) no later than ``kill + lease_ttl_s``, after which an
  admission counts it no more; the re-run drains settle every lease they take;
- no limit was hit at the backend: zero 429s and zero window violations.

Measured on the 2-core dev machine: ~75-95 s in all (the stack up ~20 s, the run ~30-45 s
of which ~10 s is the new triggerer waiting for the old one to look dead).
"""

from __future__ import annotations

import os
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import httpx
import psycopg
import pytest
import redis
from psycopg import sql

from airflow_llm_router.engine import RouterClient
from airflow_llm_router.engine.keys import RouterKeys
from airflow_llm_router.engine.types import RouterSettings
from airflow_llm_router.store import TaskStore
from llm_router_devkit.simulator import SimulatorProfile, SimulatorServer
from llm_router_devkit.stack import STARTUP_TIMEOUT_S, AirflowStack, PgServer, wait_for
from tests.conftest import POSTGRES_DSN, REDIS_URL, delete_namespace
from tests.smoke.test_real_stack import Names, dag_parsed, new_stack, set_quotas, task_errors

pytestmark = [pytest.mark.slow, pytest.mark.timeout(540)]  # startup waits up to 2 x 180 s

DAG_ID = "llm_router_crash"
DAGS_FOLDER = Path(__file__).parent / "crash_dags"
MAPPED = 2
BACKLOG = 400
TIME_SCALE = 15.0
#: Leases of the router namespace: a dead process's slots free this long after its last
#: heartbeat at the latest.
LEASE_TTL_S = 10.0
RUN_TIMEOUT_S = 150.0
#: The crash DAG's claims last DrainSettings' default.
CLAIM_TTL_S = 120.0


def live_leases(client: redis.Redis, keys: RouterKeys, models: list[str]) -> dict[str, float]:
    """Every lease in the models' live sets: lease id -> expiry (epoch ms)."""
    out: dict[str, float] = {}
    for model in models:
        for lid, expiry in client.zrange(keys.model("K_LIVE", model), 0, -1, withscores=True):
            out[lid.decode() if isinstance(lid, bytes) else str(lid)] = float(expiry)
    return out


def test_a_killed_triggerer_loses_no_task_and_repeats_only_calls_in_flight(
        tmp_path: Path) -> None:
    names = Names(uuid.uuid4().hex[:10])
    pg = PgServer.from_dsn(POSTGRES_DSN)
    home = Path(os.environ.get("LLMR_SMOKE_HOME") or tmp_path / "airflow")
    home.mkdir(parents=True, exist_ok=True)
    profile = SimulatorProfile.default(time_scale=TIME_SCALE, seed=11)
    models = [m.name for m in profile.models]
    keys = RouterKeys(names.namespace)
    measured: dict[str, float] = {}

    with ExitStack() as cleanup:
        cleanup.callback(lambda: print("triggerer crash:", measured))
        cleanup.callback(delete_namespace, names.namespace)
        cleanup.callback(pg.drop_schema, names.schema)
        store = TaskStore(POSTGRES_DSN, schema=names.schema)
        cleanup.callback(store.close)
        router = RouterClient.from_url(REDIS_URL, RouterSettings(namespace=names.namespace))
        cleanup.callback(router.close)
        raw = redis.Redis.from_url(REDIS_URL)
        cleanup.callback(raw.close)
        sim = SimulatorServer(profile).start()
        cleanup.callback(sim.stop)

        set_quotas(router, profile)
        store.migrate()
        store.enqueue([f"Crash prompt {i}: summarise record {i} in one line."
                       for i in range(BACKLOG)])
        stack = new_stack(
            names, pg, cleanup, home, DAGS_FOLDER, sim.url,
            router_extra={"lease_ttl_s": LEASE_TTL_S},
            # a triggerer heartbeats every second and looks dead 5 s after its last one,
            # so the orphaned triggers move within seconds (defaults: 5 s and 30 s)
            extra_env={"AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
                       "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "5"})
        stack.cli("db", "migrate", timeout_s=60)
        cleanup.callback(stack.stop)
        stack.start()
        wait_for("the API server", lambda: stack.alive() and stack.token(), STARTUP_TIMEOUT_S)
        wait_for(f"the DAG processor to parse {DAG_ID}",
                 lambda: dag_parsed(stack, DAG_ID), STARTUP_TIMEOUT_S, 0.5)
        stack.cli("dags", "unpause", DAG_ID)
        stack.cli("dags", "trigger", DAG_ID, "--run-id", names.run_id)

        # -- the crash: a third of the backlog solved, both drains running -----------------
        wait_for("a third of the backlog to be solved",
                 lambda: stack.alive() and store.counts()["solved"] >= BACKLOG // 3,
                 RUN_TIMEOUT_S, 0.05)
        killed = stack.kill("triggerer")
        kill_ms = time.time() * 1000
        at_kill = live_leases(raw, keys, models)
        counts_at_kill = store.counts()
        received_at_kill = httpx.get(f"{sim.url}/stats").json()["totals"]["requests"]
        in_flight_at_kill = received_at_kill - counts_at_kill["solved"]
        measured["solved_at_kill"] = counts_at_kill["solved"]
        measured["leases_at_kill"] = len(at_kill)
        measured["in_flight_at_kill"] = in_flight_at_kill
        assert counts_at_kill["solved"] < BACKLOG, "the drain ended before the kill"
        assert at_kill, "no call was in flight at the kill: the crash tested nothing"
        assert len(killed) >= 2, f"the triggerer ran no trigger runner under it: {killed}"

        # Every dead lease frees its slot within the TTL of its last heartbeat.
        latest = max(at_kill.values())
        assert latest <= kill_ms + LEASE_TTL_S * 1000, (latest - kill_ms, at_kill)

        stack.relaunch("triggerer")
        mark = time.monotonic()
        run_state = wait_for(f"run {names.run_id} to end",
                             lambda: run_ended(stack, names.run_id), RUN_TIMEOUT_S, 0.5)
        measured["after_kill_s"] = round(time.monotonic() - mark, 1)
        # Taken back at once, not after the dead drains' claims expired.
        assert measured["after_kill_s"] < CLAIM_TTL_S / 2, measured
        assert run_state == "success", \
            f"the run ended {run_state}\n{task_errors(home / 'logs', DAG_ID)}\n" \
            f"{stack.read_logs()}"

        # Every task solved exactly once (the store's own counts).
        counts = store.counts()
        assert counts["solved"] == BACKLOG, counts
        assert counts["pending"] == counts["claimed"] == counts["dead"] == 0, counts
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            attempts = conn.execute(
                sql.SQL("SELECT max(attempts), count(*) FILTER (WHERE attempts > 1) FROM {}")
                .format(sql.Identifier(names.schema, "tasks"))).fetchone()
        assert attempts is not None
        measured["max_attempts"], measured["retried_tasks"] = attempts[0], attempts[1]
        assert attempts[0] == 1, attempts  # adopted claims keep their attempt

        # The backend's own counters: repeats bounded by the calls in flight at the kill.
        totals = httpx.get(f"{sim.url}/stats").json()["totals"]
        repeated = totals["completed"] - BACKLOG
        measured["backend_completed"] = totals["completed"]
        measured["repeated_calls"] = repeated
        assert 0 <= repeated <= in_flight_at_kill, (totals, in_flight_at_kill)
        assert totals["rejected_429"] == 0, totals
        assert totals["violations"] == 0, totals

        # The re-run drains settled every lease they took: what still holds a slot is the
        # dead process's, each expiring by kill + TTL (asserted above; expired leases are
        # reclaimed lazily, by the next admission on their model).
        now_ms = time.time() * 1000
        holding = {k for k, v in live_leases(raw, keys, models).items() if v > now_ms}
        assert holding <= set(at_kill), holding - set(at_kill)

        report = stack.stop()
        assert not report.left, report


def run_ended(stack: AirflowStack, run_id: str) -> str | None:
    stack.alive()
    state = stack.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}").json().get("state")
    return state if state in ("success", "failed") else None
