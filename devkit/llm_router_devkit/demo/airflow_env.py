"""Airflow for the demo: its home, its three connections, its metadata DB, and one DAG run.

Airflow reads its configuration when it is first imported, so :func:`configure` must run
before anything imports ``airflow``; the other functions import it lazily.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pluggy
from psycopg.conninfo import conninfo_to_dict

__all__ = ["configure", "connection_env", "load_dag", "migrate_metadata_db", "return_values",
           "run_dag", "run_start_epoch"]

ROUTER_CONN_ID = "llm_router_default"
BACKEND_CONN_ID = "models_backend_default"
POSTGRES_CONN_ID = "postgres_default"


def _env_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def router_connection(redis_url: str, namespace: str) -> dict[str, Any]:
    """An ``llm_router`` connection for ``redis[s]://[user:password@]host:port/db``."""
    url = urlsplit(redis_url)
    if url.scheme not in ("redis", "rediss"):
        raise ValueError(f"--redis-url must start with redis:// or rediss://, got {url.scheme!r}")
    extra: dict[str, Any] = {"namespace": namespace}
    db = url.path.strip("/")
    if db:
        extra["db"] = int(db)
    if url.scheme == "rediss":
        extra["ssl"] = True
    conn: dict[str, Any] = {"conn_type": "llm_router", "host": url.hostname or "127.0.0.1",
                            "port": url.port or 6379, "extra": extra}
    if url.username:
        conn["login"] = unquote(url.username)
    if url.password:
        conn["password"] = unquote(url.password)
    return conn


def postgres_connection(dsn: str) -> dict[str, Any]:
    """A ``postgres`` connection for a libpq DSN or URI; other libpq settings go to extra."""
    params = conninfo_to_dict(dsn)
    conn: dict[str, Any] = {"conn_type": "postgres", "host": params.pop("host", "127.0.0.1"),
                            "port": int(str(params.pop("port", 5432))),
                            "login": params.pop("user", "postgres"),
                            "schema": params.pop("dbname", "postgres")}
    password = params.pop("password", None)
    if password:
        conn["password"] = password
    if params:
        conn["extra"] = {k: str(v) for k, v in params.items()}
    return conn


def connection_env(
    *, redis_url: str, postgres_dsn: str, backend_url: str, namespace: str,
    backend_timeout_s: float = 300.0,
) -> dict[str, str]:
    """The three ``AIRFLOW_CONN_*`` variables (JSON form) the example DAGs use."""
    backend = {"conn_type": "models_backend", "host": backend_url.rstrip("/"),
               "extra": {"timeout_s": backend_timeout_s}}
    return {
        _env_name(ROUTER_CONN_ID): json.dumps(router_connection(redis_url, namespace)),
        _env_name(POSTGRES_CONN_ID): json.dumps(postgres_connection(postgres_dsn)),
        _env_name(BACKEND_CONN_ID): json.dumps(backend),
    }


def configure(home: Path, dags_folder: Path, connections: Mapping[str, str]) -> None:
    """Point Airflow at the demo's home and DAGs folder, quietly, with these connections.

    :raises RuntimeError: if ``airflow`` was imported already (it would keep its old config).
    """
    if "airflow" in sys.modules:
        raise RuntimeError("configure() must run before airflow is imported")
    home.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__FERNET_KEY": _fernet_key(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__LOGGING__LOGGING_LEVEL": os.environ.get("LLMR_DEMO_LOG_LEVEL", "WARNING"),
            **connections,
        }
    )


def _fernet_key(home: Path) -> str:
    """The demo home's Fernet key (made once), so Airflow encrypts what it stores and does
    not warn about an empty key."""
    path = home / "fernet.key"
    if not path.exists():
        from cryptography.fernet import Fernet

        path.write_bytes(Fernet.generate_key())
        path.chmod(0o600)
    return path.read_text().strip()


def migrate_metadata_db() -> None:
    """Create or upgrade the metadata DB (SQLite under AIRFLOW_HOME); a few seconds at first."""
    from airflow.utils.db import upgradedb

    upgradedb()


def load_dag(dags_folder: Path, dag_id: str) -> Any:
    """Parse ``<dags_folder>/<dag_id>.py`` and return the DAG, or raise with its import error."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(dags_folder / f"{dag_id}.py"), safe_mode=False)
    if bag.import_errors:
        raise RuntimeError(f"cannot load {dag_id}: {bag.import_errors}")
    dag = bag.dags.get(dag_id)
    if dag is None:
        raise RuntimeError(f"no DAG {dag_id!r} in {dags_folder}")
    return dag


#: Marks Airflow listener hooks (``airflow.listeners.hookimpl``, without importing Airflow).
_hookimpl = pluggy.HookimplMarker("airflow")


class _KeepSigterm:
    """An Airflow task listener that puts this process's SIGTERM handler back as each task
    starts.

    ``dag.test()`` runs each task in this process through Airflow's task runner, which sets
    a SIGTERM handler of its own (it only calls the operator's ``on_kill``, as it would in a
    task's own process) and never restores the previous one: from the first task on, a
    SIGTERM to the demo was swallowed and its services were never stopped. The listener is
    called in the main thread after that handler is set and before the task executes (and
    before its trigger runs inline), so the demo's own handler is in force again.
    """

    def __init__(self, handler: Any) -> None:
        self.handler = handler

    @_hookimpl
    def on_task_instance_running(self, previous_state: Any, task_instance: Any) -> None:
        signal.signal(signal.SIGTERM, self.handler)


def run_dag(dag: Any, conf: Mapping[str, Any]) -> tuple[str, float, str | None]:
    """One run with ``dag.test()`` (tasks and triggers in this process); (state, seconds,
    run id). The SIGTERM handler in force when it is called stays in force throughout."""
    from airflow.sdk.listener import get_listener_manager

    handler = signal.getsignal(signal.SIGTERM)
    keeper = _KeepSigterm(handler)
    listeners = get_listener_manager()
    listeners.add_listener(keeper)
    start = time.monotonic()
    try:
        run = dag.test(run_conf=dict(conf))
    finally:
        listeners.pm.unregister(keeper)
        signal.signal(signal.SIGTERM, handler)
    return (str(getattr(run, "state", "unknown")), time.monotonic() - start,
            getattr(run, "run_id", None))


def run_start_epoch(dag_id: str, run_id: str) -> float | None:
    """When the run started (epoch s): its ``queued_at``, when Airflow had the run, as the
    benchmark times it. A run ``dag.test()`` makes running at once has none; its
    ``created_at`` stands in: when Airflow had the run, after ``dag.test()`` parsed the
    DAGs folder to sync its bundle (a deployment's DAG processor does that before any run),
    not its ``start_date``, which ``dag.test()`` sets before that parse. None: no such
    run."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.execute(select(DagRun.queued_at, DagRun.created_at).where(
            DagRun.dag_id == dag_id, DagRun.run_id == run_id)).first()
    stamp = None if row is None else (row.queued_at or row.created_at)
    return None if stamp is None else float(stamp.timestamp())


def return_values(dag_id: str, run_id: str, task_ids: Sequence[str]) -> list[Any]:
    """The XCom ``return_value`` of each of ``task_ids`` (every map index) in one run."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(
            run_id=run_id, key="return_value", dag_ids=dag_id, task_ids=list(task_ids)))
        return [XComModel.deserialize_value(row) for row in rows]
