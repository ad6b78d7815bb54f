"""Everything one benchmark run stands on, fresh per run and removed afterwards.

A simulator in its own process (so the callers' bursts do not skew its clock), a router
namespace on the shared Redis, a schema with the task store and the quota store (the quotas
loaded as a deployment loads them) and an Airflow metadata database on the
shared PostgreSQL, an AIRFLOW_HOME in a temporary directory, and the real scheduler,
triggerer, DAG processor and API server (LocalExecutor) as one process group. Every piece
is registered on an ``ExitStack`` as soon as it exists, so a failure or Ctrl-C at any
point removes what was made so far.
"""

from __future__ import annotations

import tempfile
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from airflow_llm_router.engine import RouterClient, RouterSettings
from airflow_llm_router.quotas import QuotaStore
from airflow_llm_router.store import TaskStore
from llm_router_devkit.demo.airflow_env import postgres_connection, router_connection
from llm_router_devkit.demo.router_quotas import router_quotas
from llm_router_devkit.demo.run import drop_namespace
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.server import SimulatorProcess
from llm_router_devkit.stack import AirflowStack, PgServer, wait_for

__all__ = ["Services", "airflow_settings", "load_quotas", "run_router_connection",
           "start_services"]

#: Where the example DAGs (as_is_baseline, llm_router_drain) are.
DAGS_FOLDER = Path(__file__).resolve().parents[2] / "example_dags"
STARTUP_TIMEOUT_S = 120.0


@dataclass
class Services:
    suffix: str
    profile: SimulatorProfile
    sim: SimulatorProcess
    router: RouterClient
    store: TaskStore
    #: The run's quotas, as a deployment keeps them (PostgreSQL, pushed to Redis): W3's
    #: cut goes through it too.
    quotas: QuotaStore
    stack: AirflowStack
    dsn: str

    @property
    def schema(self) -> str:
        return f"llmr_bench_{self.suffix}"


def _fresh_schema(dsn: str, schema: str) -> TaskStore:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    store = TaskStore(dsn, schema=schema)
    store.migrate()
    return store


def airflow_settings(parallelism: int) -> dict[str, str]:
    """The Airflow settings the benchmark adds to the stack's (``AirflowStack.env``):
    only one, and it is sizing, not tuning. The log level, the API server's workers and
    every timeout stay Airflow's defaults, as a deployment runs them."""
    # 20 mapped as-is workers must run at once: the per-DAG default is 16.
    return {"AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(parallelism)}


def load_quotas(dsn: str, router: RouterClient, schema: str,
                profile: SimulatorProfile) -> QuotaStore:
    """The run's quotas in a quota store of the run's schema, loaded as ``llm-router quotas
    load`` does: stored, audited and pushed to Redis with the sync marker. Quotas written
    into Redis alone carry no marker: the hook's clients in the sensor and solvers would
    take Redis for one that lost its data and, at each advice read, look for a quota
    table that does not exist, with a warning."""
    quotas = QuotaStore(dsn, router, schema=schema)
    quotas.migrate()
    quotas.load(router_quotas(profile), actor="bench.e2e", source="bench")
    return quotas


def run_router_connection(redis_url: str, namespace: str, schema: str) -> dict[str, Any]:
    """The router connection, naming the run's quota store (its schema; a deployment's
    default is ``llm_router``) so the hook's clients restore from it."""
    conn = router_connection(redis_url, namespace)
    conn["extra"]["quota_schema"] = schema
    return conn


def start_services(stack: ExitStack, *, profile: SimulatorProfile, redis_url: str, dsn: str,
                   dag_id: str, parallelism: int, keep_home: Path | None = None) -> Services:
    """Start everything for one run (see the module docstring); returns once the API server
    answers and the DAG processor has parsed ``dag_id``."""
    suffix = uuid.uuid4().hex[:10]
    namespace, schema, database = f"bench-{suffix}", f"llmr_bench_{suffix}", f"llmr_bench_{suffix}"
    sim = SimulatorProcess(profile).start()
    stack.callback(sim.stop)
    router = RouterClient.from_url(redis_url, RouterSettings(namespace=namespace))
    stack.callback(router.close)
    stack.callback(drop_namespace, router, namespace)
    pg = PgServer.from_dsn(dsn)
    stack.callback(pg.drop_schema, schema)
    store = _fresh_schema(dsn, schema)
    stack.callback(store.close)
    quotas = load_quotas(dsn, router, schema, profile)
    pg.create_database(database)
    stack.callback(pg.drop_database, database)
    home = keep_home or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llmr-bench-")))
    home.mkdir(parents=True, exist_ok=True)
    airflow = AirflowStack(
        home=home, dags_folder=DAGS_FOLDER, sql_alchemy_conn=pg.sqlalchemy_url(database),
        parallelism=parallelism,
        connections={
            "llm_router_default": run_router_connection(redis_url, namespace, schema),
            "postgres_default": postgres_connection(dsn),
            "models_backend_default": {"conn_type": "models_backend", "host": sim.url,
                                       "extra": {"timeout_s": 300}},
        },
        extra_env=airflow_settings(parallelism),
    )
    airflow.cli("db", "migrate", timeout_s=180)
    stack.callback(airflow.stop)
    airflow.start()
    wait_for("the API server", lambda: airflow.alive() and airflow.token(), STARTUP_TIMEOUT_S)
    wait_for(f"the DAG processor to parse {dag_id}",
             lambda: airflow.alive() and airflow.api("GET", f"/dags/{dag_id}").status_code == 200,
             STARTUP_TIMEOUT_S, 0.5)
    return Services(suffix, profile, sim, router, store, quotas, airflow, dsn)

