"""The per-side CPU the solver benchmark reports is read right: a process's CPU from
``/proc`` counts what it burnt (and not what it slept), and the PostgreSQL backends of a
run are told apart from others by their ``application_name`` on a real server."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from bench.common import DEFAULT_DSN
from bench.proc_cpu import PgBackends, ProcessCpu, cpu_s

#: a query that keeps its backend busy for a few hundred ms of CPU
BUSY_SQL = "SELECT count(*) FROM generate_series(1, 3000000)"


def _child(code: str) -> subprocess.Popen[str]:
    """A Python child that runs ``code`` once told to (a line on stdin), then waits for
    stdin to close."""
    return subprocess.Popen(
        [sys.executable, "-c", f"import sys, time\nsys.stdin.readline()\n{code}\n"
                               "print('done', flush=True)\nsys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


@pytest.fixture
def children() -> Iterator[dict[str, subprocess.Popen[str]]]:
    procs = {"busy": _child("t = time.process_time()\n"
                            "while time.process_time() - t < 0.3: pass"),
             "idle": _child("time.sleep(0.3)")}
    yield procs
    for p in procs.values():
        p.kill()
        p.wait()


def test_process_cpu_counts_burnt_cpu_not_sleep(
        children: dict[str, subprocess.Popen[str]]) -> None:
    sides = ProcessCpu({name: p.pid for name, p in children.items()} | {"gone": None})
    sides.start()
    for p in children.values():
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in children.values():
        assert p.stdout is not None and p.stdout.readline() == "done\n"
    spent = sides.stop()
    assert set(spent) == {"busy", "idle"}  # a side with no process is left out
    assert spent["busy"] >= 0.25
    assert spent["idle"] < 0.1


def test_cpu_s_of_a_gone_process_is_none() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert cpu_s(p.pid) is None


def test_pg_backends_counts_only_the_runs_backends() -> None:
    # both names unique: the server is shared, and a run of this test beside it would
    # otherwise add its own backend to a fixed name's count
    run, other = (f"llmr-cpu-test-{side}-{uuid.uuid4().hex[:8]}" for side in ("mine", "other"))
    with psycopg.connect(DEFAULT_DSN, autocommit=True, application_name=run) as mine, \
            psycopg.connect(DEFAULT_DSN, autocommit=True, application_name=other) as theirs:
        with PgBackends(DEFAULT_DSN, run) as pg:
            theirs.execute(BUSY_SQL)
            theirs.execute(BUSY_SQL)
            mine.execute(BUSY_SQL)
            # both backends are still open when the sampler's last read happens (at exit)
        assert pg.backends == 1
        mine_cpu = pg.spent()
        with PgBackends(DEFAULT_DSN, other) as pg_other:
            pass
    assert mine_cpu >= 0.05
    # the other backend ran the query twice: counted under its own name, not the run's
    assert pg_other.backends == 1 and pg_other.spent() > mine_cpu
