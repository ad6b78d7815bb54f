"""``AirflowStack.add_triggerer``: a second real ``airflow triggerer`` on the stack's metadata
database, registered as its own triggerer job and stopped with the stack.

A real stack (scheduler, triggerer, DAG processor, API server; no DAGs) on a fresh
PostgreSQL metadata database, dropped afterwards. ~30-40 s on the 2-core dev machine, most
of it ``db migrate`` and the components' start-up.
"""

from __future__ import annotations

import uuid
from contextlib import ExitStack
from pathlib import Path

import psycopg
import pytest

from llm_router_devkit.stack import AirflowStack, PgServer, wait_for
from tests.conftest import POSTGRES_DSN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def running_triggerers(dsn: str) -> list[int]:
    """Ids of the triggerer jobs that are running and have heartbeated in the last 30 s."""
    query = ("SELECT id FROM job WHERE job_type = 'TriggererJob' AND state = 'running' "
             "AND latest_heartbeat > now() - interval '30 seconds' ORDER BY id")
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [int(row[0]) for row in conn.execute(query)]


def test_a_second_triggerer_joins_and_stops_with_the_stack(tmp_path: Path) -> None:
    pg = PgServer.from_dsn(POSTGRES_DSN)
    database = f"llmr_stack_{uuid.uuid4().hex[:10]}"
    dags = tmp_path / "dags"
    dags.mkdir()
    with ExitStack() as cleanup:
        pg.create_database(database)
        cleanup.callback(pg.drop_database, database)
        stack = AirflowStack(home=tmp_path, dags_folder=dags, parallelism=2,
                             sql_alchemy_conn=pg.sqlalchemy_url(database), connections={})
        stack.cli("db", "migrate", timeout_s=90)
        cleanup.callback(stack.stop)
        with pytest.raises(RuntimeError, match="not started"):
            stack.add_triggerer()
        stack.start()
        meta = pg.dsn(database)
        first = wait_for("the stack's triggerer job",
                         lambda: stack.alive() and running_triggerers(meta), 60.0, 0.5)

        pid = stack.add_triggerer()
        assert stack.component_pid("triggerer-2") == pid
        with pytest.raises(ValueError, match="already"):
            stack.add_triggerer()
        both = wait_for("two running triggerer jobs",
                        lambda: stack.alive() and len(running_triggerers(meta)) == 2 and
                        running_triggerers(meta), 60.0, 0.5)
        assert set(first) < set(both)
        assert pid in stack.members()

        report = stack.stop()
        assert not report.left, report
        assert not stack.members()
        assert (tmp_path / "triggerer-2.log").stat().st_size > 0
