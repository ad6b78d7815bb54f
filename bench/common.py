"""What the benchmarks share: their options, output folders (under ``bench/out/``, which
git ignores), report sections and clean-up."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_router_devkit import redis_tools
from llm_router_devkit.interrupt import interrupted, sigterm_as_interrupt

if TYPE_CHECKING:
    from airflow_llm_router.store import TaskStore
    from llm_router_devkit.redis_tools import PrivateRedis
    from llm_router_devkit.simulator import SimulatorProfile
    from llm_router_devkit.simulator.server import SimulatorProcess

__all__ = [
    "BENCHMARKS_MD",
    "DEFAULT_DSN",
    "OUT_DIR",
    "add_run_options",
    "drain_once",
    "drop_namespace",
    "drop_schema",
    "enqueue_synthetic",
    "guarded",
    "interruptible",
    "private_services",
    "publish",
    "pyplot",
    "results_dir",
    "warm_up",
    "write_raw",
    "write_section",
]

#: Where a benchmark writes what it measured unless told otherwise: ignored by git, since
#: raw runs are not kept; a figure the docs quote is kept in ``bench/baselines/``.
OUT_DIR = Path(__file__).resolve().parents[1] / "bench" / "out"
#: The report each benchmark rewrites its own section of (``--write``): a lab notebook under
#: :data:`OUT_DIR`, not ``docs/benchmarks.md``, whose figures come from the baselines.
BENCHMARKS_MD = OUT_DIR / "benchmarks.md"
#: A PostgreSQL a benchmark may create and drop its own schema in.
DEFAULT_DSN = os.environ.get("LLMR_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def add_run_options(parser: argparse.ArgumentParser, *, heading: str,
                    time_scale: float | None = None) -> None:
    """The options every simulator benchmark takes: ``--time-scale`` (when given a
    default), ``--seed``, ``--postgres-dsn``, ``--write`` (its ``heading`` section of
    :data:`BENCHMARKS_MD`) and ``--out`` (the JSON results)."""
    if time_scale is not None:
        parser.add_argument("--time-scale", type=float, default=time_scale,
                            help="simulator speed-up (the 60 s window lasts 60/scale s)")
    parser.add_argument("--seed", type=int, default=1, help="the simulator's seed")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN,
                        help="a PostgreSQL the benchmark may create and drop a schema in")
    parser.add_argument("--write", action="store_true", help=f"rewrite the section "
                        f"'{heading[3:]}' of bench/out/{BENCHMARKS_MD.name}")
    parser.add_argument("--out", type=Path, help="also write the JSON results here")


def results_dir(root: Path, suffix: str, module: str,
                argv: Sequence[str] | None) -> tuple[Path, str, str]:
    """A new results folder ``<root>/<UTC time>-<suffix>`` holding ``command.txt`` (how to
    run it again); returns it, that command and the start time, as the reports print them."""
    out = root / (time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{suffix}")
    out.mkdir(parents=True, exist_ok=True)
    args = list(sys.argv[1:] if argv is None else argv)
    command = f"python -m {module} {shlex.join(args)}"
    (out / "command.txt").write_text(command + "\n")
    return out, command, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def write_section(path: Path, heading: str, text: str) -> None:
    """Replace the section that starts with ``heading`` (up to the next ``## `` heading) by
    ``text``, or append it: each benchmark rewrites only its own section."""
    body = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.M | re.S)
    section = text.rstrip() + "\n\n"
    if pattern.search(body):
        body = pattern.sub(lambda _: section, body, count=1)
    else:
        body = body.rstrip() + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body.rstrip() + "\n")


def drop_namespace(redis_url: str, namespace: str) -> None:
    """Delete every key of a router namespace (a benchmark's own, made for one run)."""
    redis_tools.drop_namespace(redis_url, namespace)


def publish(text: str, heading: str, out: Path, write: bool) -> None:
    """Print a benchmark's section and, if ``write``, put it in ``out``."""
    print()
    print(text)
    if write:
        write_section(out, heading, text)
        print(f"wrote {out}")


def write_raw(path: Path, doc: dict[str, Any]) -> None:
    """Write a run's raw figures as JSON with the load average at its end (figures from a
    loaded machine are compared within a run), and say where."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    path.write_text(json.dumps({"load_average": load, **doc}, indent=1))
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; raw: {path}")


def drop_schema(dsn: str, schema: str) -> None:
    """Drop a PostgreSQL schema a benchmark made for one run, with everything in it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def private_services(stack: ExitStack, dsn: str, schema: str, profile: SimulatorProfile
                     ) -> tuple[PrivateRedis, SimulatorProcess, TaskStore]:
    """One run's own Redis, simulator and task store (``schema``, not yet migrated), each
    stopped, and the schema dropped, when ``stack`` closes: a run shares nothing with
    another or with what else uses this PostgreSQL."""
    from airflow_llm_router.store import TaskStore
    from llm_router_devkit.redis_tools import PrivateRedis
    from llm_router_devkit.simulator.server import SimulatorProcess

    redis_server = PrivateRedis()
    redis_server.start()
    stack.callback(redis_server.close)
    sim = stack.enter_context(SimulatorProcess(profile))
    store = TaskStore(dsn, schema=schema)
    stack.callback(drop_schema, dsn, schema)
    stack.callback(store.close)
    return redis_server, sim, store


def interruptible(body: Callable[[], int], stopped: str = "services stopped") -> int:
    """Run a benchmark's ``main`` (or its body) so that Ctrl-C and SIGTERM both stop it
    cleanly: either unwinds the body, whose context managers stop the services it started
    (private Redis, simulator, API server, Airflow stack), then one line on stderr and
    status 130 (Ctrl-C) or 143 (SIGTERM). Without it a SIGTERM (``timeout``, a cancelled
    CI job, ``kill``) ends the process at once and leaves those services running."""
    try:
        with sigterm_as_interrupt():
            return body()
    except KeyboardInterrupt as err:
        return interrupted(err, stopped)


def guarded(body: Callable[[], int]) -> int:
    """Run a benchmark's ``main`` body as :func:`interruptible` does (Ctrl-C: status 130,
    SIGTERM: 143, its services stopped by their context managers), and any other failure
    with one ``error:`` line and status 2, never a traceback."""

    def checked() -> int:
        try:
            return body()
        except Exception as err:
            print(f"error: {type(err).__name__}: {err}".splitlines()[0], file=sys.stderr)
            return 2

    return interruptible(checked)


async def drain_once(schema: str, worker_id: str, *, timeout_s: float,
                     **settings: Any) -> dict[str, Any]:
    """Run one ``DrainTrigger`` over ``<schema>.tasks`` through the default connections (a
    benchmark sets them in the environment) until it ends; its final event's payload.
    ``settings`` are the drain's (``DrainSettings``), with a 50 ms back-off unless given."""
    from airflow_llm_router.triggers import DrainTrigger

    trigger = DrainTrigger(
        store={"postgres_conn_id": "postgres_default", "schema": schema, "table": "tasks"},
        worker_id=worker_id, settings={"backoff_s": 0.05, **settings},
        router_conn_id="llm_router_default", backend_conn_id="models_backend_default",
        deadline=time.time() + timeout_s)
    return dict((await anext(trigger.run())).payload)


def warm_up(router: Any, sim_url: str, models: Sequence[str], prompt: str,
            window_s: float) -> None:
    """One real call per model through ``router`` (a sync ``RouterClient``: admit, the
    simulator's ``/single``, complete with the answer's usage), so the engine starts with
    learned outputs and latencies, as in a deployment whose models have answered before;
    then a window and a second pass, so the warm-up calls have left every window when the
    run starts (reset the backend's counters after it)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from airflow_llm_router.engine import Admission

    def one(model: str) -> None:
        lease = router.admit(input_tokens=max(1, len(prompt) // 4), models=[model])
        if not isinstance(lease, Admission):
            raise RuntimeError(f"warm-up: {model} did not admit: {lease}")
        reply = httpx.post(f"{sim_url}/single", json={"model": model, "prompt": prompt},
                           timeout=120)
        usage = (reply.json().get("usage") or {}) if reply.status_code == 200 else {}
        router.complete(lease.lease_id, usage.get("input_tokens"), usage.get("output_tokens"))

    with ThreadPoolExecutor(len(models)) as pool:
        list(pool.map(one, models))
    time.sleep(window_s + 1.0)


def enqueue_synthetic(store: TaskStore, tasks: int, chars: int) -> None:
    """``tasks`` prompts ``task <i> xxx...`` (``chars`` characters of padding), in calls of
    10,000 so a million-task backlog is not one statement."""
    for start in range(0, tasks, 10_000):
        store.enqueue([f"task {i} " + "x" * chars
                       for i in range(start, min(tasks, start + 10_000))])


def pyplot() -> Any | None:
    """matplotlib's pyplot on the file-only Agg backend, or None where matplotlib is not
    installed (it is in the devkit's ``bench`` extra)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt
