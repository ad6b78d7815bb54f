"""``AirflowStack(executor="celery")`` with one ``add_celery_worker``: a one-task DAG runs to
success through the real CeleryExecutor, on the stack's own queue of a Redis broker
(the local Redis, database 15), with the metadata database as Celery's result backend.

The task writes the pids above it; the worker's pid among them shows the Celery worker ran
it (with LocalExecutor the scheduler's own children would). A fresh PostgreSQL metadata
database, dropped afterwards; the stack's broker queue is deleted when it stops. ~45-60 s
on the 2-core dev machine, most of it ``db migrate`` and the components' start-up.
Skipped only when the Celery provider is not installed (the devkit's ``bench`` extra).
"""

from __future__ import annotations

import importlib.util
import json
import textwrap
import uuid
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from llm_router_devkit.stack import AirflowStack, PgServer, wait_for
from tests.conftest import POSTGRES_DSN, REDIS_URL

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.skipif(importlib.util.find_spec("airflow.providers.celery") is None,
                       reason="the Celery provider is not installed: "
                              "pip install -e 'devkit[bench]'"),
]

DAG_ID = "llmr_celery_one_task"
#: The DAG: one task that records the pids of every process above it.
DAG_FILE = textwrap.dedent(f'''
    from __future__ import annotations

    import os
    from pathlib import Path

    from airflow.sdk import DAG, task

    OUT = Path(os.environ["LLMR_CELERY_TEST_OUT"])


    def _parent(pid: int) -> int:
        stat = Path(f"/proc/{{pid}}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[1])


    with DAG(dag_id="{DAG_ID}", schedule=None, catchup=False):

        @task
        def record_ancestors() -> int:
            pids, pid = [], os.getpid()
            while pid > 1:
                pids.append(pid)
                pid = _parent(pid)
            OUT.write_text(" ".join(map(str, pids)))
            return len(pids)

        record_ancestors()
''')


def broker_url() -> str:
    """The test Redis, on database 15 (the tests' router namespaces use database 0)."""
    return urlunsplit(urlsplit(REDIS_URL)._replace(path="/15"))


def test_celery_worker_runs_a_task_to_success(tmp_path: Path) -> None:
    pg = PgServer.from_dsn(POSTGRES_DSN)
    database = f"llmr_celery_{uuid.uuid4().hex[:10]}"
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "one_task.py").write_text(DAG_FILE)
    out = tmp_path / "ancestors.txt"
    with ExitStack() as cleanup:
        pg.create_database(database)
        cleanup.callback(pg.drop_database, database)
        stack = AirflowStack(home=tmp_path, dags_folder=dags, parallelism=2,
                             sql_alchemy_conn=pg.sqlalchemy_url(database), connections={},
                             executor="celery", celery_broker_url=broker_url(),
                             extra_env={"LLMR_CELERY_TEST_OUT": str(out)})
        with pytest.raises(ValueError, match="executor: 'kubernetes'"):
            AirflowStack(home=tmp_path, dags_folder=dags, sql_alchemy_conn="x",
                         connections={}, executor="kubernetes")
        stack.cli("db", "migrate", timeout_s=90)
        cleanup.callback(stack.stop)
        stack.start()
        worker = stack.add_celery_worker("worker-1", concurrency=1)
        assert stack.component_pid("worker-1") == worker
        wait_for("the API server", lambda: stack.alive() and stack.token(), 90.0)
        wait_for(f"the DAG processor to parse {DAG_ID}",
                 lambda: stack.alive() and stack.api("GET", f"/dags/{DAG_ID}").status_code
                 == 200, 90.0, 0.5)
        stack.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False}).raise_for_status()
        run_id = f"celery_{uuid.uuid4().hex[:8]}"
        stack.api("POST", f"/dags/{DAG_ID}/dagRuns",
                  json={"dag_run_id": run_id, "logical_date": None}).raise_for_status()

        def ended() -> str | None:
            stack.alive()
            state = stack.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}").json().get("state")
            return str(state) if state in ("success", "failed") else None

        state = wait_for(f"run {run_id} to end", ended, 90.0, 0.5)
        assert state == "success", stack.read_logs()

        ti = stack.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/"
                              "record_ancestors").json()
        assert ti["state"] == "success" and ti["queue"] == stack.celery_queue, ti
        ancestors = [int(p) for p in out.read_text().split()]
        assert worker in ancestors, (worker, ancestors)
        assert stack.component_pid("scheduler") not in ancestors

        report = stack.stop()
        assert not report.left, report
        with redis.Redis.from_url(broker_url()) as broker:
            left = list(broker.scan_iter(match=f"{stack.celery_queue}*"))
        assert not left, json.dumps([k.decode() for k in left])
