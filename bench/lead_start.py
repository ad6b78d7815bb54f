"""``python -m bench.lead_start``: the drain's lead solver from its task process's start to
its first call, without the rest of Airflow.

A task process is forked from its worker with Airflow's task runner already imported; it
then imports the DAG file and runs the task's ``execute``. That is the part of the DAG
run's start to the first call that is the provider's, and this benchmark times it alone,
version against version (``--src NAME=DIR``, each a checkout of the repository whose
``airflow_llm_router`` and ``example_dags`` the child imports), interleaved run by run, so
a loaded machine weighs on both alike. Airflow's part (the scheduler's loop, the executor,
the supervisor's ``ti_run`` call to the API server) is ``bench.e2e``'s start path.

Each run: a fresh router namespace (quotas synced as the quota store does, so its epoch
marker is set as in a deployment), a fresh task-store schema seeded with W1's 2,000
prompts and the claim log of :mod:`llm_router_devkit.claim_log`, and one simulator for all
runs.
A new interpreter imports the task runner, then (timed from there) the DAG file, renders
the lead's templates with the DAG's defaults and calls ``execute``; it is stopped once
the backend has its first call. Phases, each from the timed start: ``dag parsed``,
``execute``, ``first claim`` (the claim log), ``first call`` (the simulator's ``/stats``,
polled every 10 ms). Raw output goes to ``bench/out/lead-start-<stamp>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from bench.common import DEFAULT_DSN, OUT_DIR, interruptible
from bench.e2e.workloads import build
from llm_router_devkit.claim_log import install_claim_log, read_claim_log
from llm_router_devkit.demo.airflow_env import postgres_connection, router_connection
from llm_router_devkit.demo.router_quotas import router_quotas
from llm_router_devkit.demo.run import drop_namespace
from llm_router_devkit.demo.seed import seed_store
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.server import SimulatorProcess
from llm_router_devkit.stack import PgServer, wait_for

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("dag parsed", "execute", "first claim", "first call")

#: The task process, after its fork: the task runner is imported (as in a worker), then
#: the clock starts. Prints one JSON line of epoch marks.
CHILD = r"""
import json, runpy, sys, time, types
import airflow.sdk.execution_time.task_runner  # a forked task process has it
from airflow.sdk.exceptions import TaskDeferred
marks = {"start": time.time()}
ns = runpy.run_path(sys.argv[1])
marks["dag parsed"] = time.time()
dag = ns["dag"]
lead = dag.task_dict["lead"]
params = {k: v for k, v in dag.params.dump().items()}
params.update(json.loads(sys.argv[2]))
ti = types.SimpleNamespace(dag_id=dag.dag_id, task_id="lead", run_id="lead_start",
                           map_index=-1, try_number=1)
context = {"params": params, "ti": ti}
lead.render_template_fields(context, dag.get_template_env())
marks["execute"] = time.time()
print(json.dumps(marks), flush=True)
try:
    lead.execute(context)
except TaskDeferred:
    pass
"""


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.lead_start", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", action="append", default=[], metavar="NAME=DIR",
                   help="a version to time: a checkout of this repository (default: "
                        "this one, as 'this')")
    p.add_argument("--runs", type=int, default=5, help="runs of each version, interleaved")
    p.add_argument("--time-scale", type=float, default=3.0)
    p.add_argument("--redis-url", default=os.environ.get("LLMR_TEST_REDIS_URL",
                                                         "redis://127.0.0.1:6379/0"))
    p.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    p.add_argument("--out", type=Path, default=OUT_DIR)
    p.add_argument("--verbose", action="store_true", help="show the lead process's stderr")
    args = p.parse_args(argv)
    sources: dict[str, Path] = {}
    for item in args.src or [f"this={ROOT}"]:
        name, _, directory = item.partition("=")
        if not name or not directory or not (Path(directory) / "example_dags").is_dir():
            p.exit(2, f"error: --src {item!r}: expected NAME=DIR, DIR a checkout of this "
                      "repository (with example_dags/)\n")
        sources[name] = Path(directory).resolve()
    args.sources = sources
    return args


def one_run(args: argparse.Namespace, src: Path, sim: SimulatorProcess,
            profile: SimulatorProfile) -> dict[str, float | None]:
    """One lead start on a fresh namespace and schema; seconds from the timed start to
    each of :data:`PHASES`."""
    from airflow_llm_router.engine import ModelQuota, RouterClient, RouterSettings
    from airflow_llm_router.store import TaskStore

    suffix = uuid.uuid4().hex[:10]
    namespace, schema = f"leadstart-{suffix}", f"llmr_leadstart_{suffix}"
    router = RouterClient.from_url(args.redis_url, RouterSettings(namespace=namespace))
    pg = PgServer.from_dsn(args.postgres_dsn)
    store = TaskStore(args.postgres_dsn, schema=schema)
    child: subprocess.Popen[str] | None = None
    try:
        router.sync_quotas({m: ModelQuota.parse(q) for m, q in router_quotas(profile).items()})
        store.migrate()
        seed_store(store, build("W1", 1, [m.name for m in profile.models]).initial)
        install_claim_log(args.postgres_dsn, schema)
        http = httpx.Client(base_url=sim.url, timeout=10)
        reset = time.time()
        http.post("/stats/reset").raise_for_status()
        with tempfile.TemporaryDirectory(prefix="llmr-leadstart-") as home:
            env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
            env.update({
                "AIRFLOW_HOME": home, "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "PYTHONPATH": str(src),
                "AIRFLOW_CONN_LLM_ROUTER_DEFAULT": json.dumps(
                    router_connection(args.redis_url, namespace)),
                "AIRFLOW_CONN_POSTGRES_DEFAULT": json.dumps(
                    postgres_connection(args.postgres_dsn)),
                "AIRFLOW_CONN_MODELS_BACKEND_DEFAULT": json.dumps(
                    {"conn_type": "models_backend", "host": sim.url,
                     "extra": {"timeout_s": 300}}),
            })
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(src / "example_dags" / "llm_router_drain.py"),
                 json.dumps({"store_schema": schema, "linger_s": 0})],
                env=env, cwd=home, stdout=subprocess.PIPE,
                stderr=None if args.verbose else subprocess.DEVNULL,
                text=True, start_new_session=True)
            assert child.stdout is not None
            marks = json.loads(child.stdout.readline() or "{}")
            if not marks:
                print(f"error: the lead's process of {src} ended before it started; "
                      "run it again with --verbose to see why", file=sys.stderr)
                raise SystemExit(2)
            arrival = wait_for("the first call",
                               lambda: http.get("/stats").json()["first_arrival_s"], 120.0, 0.01)
            first_call = reset + float(arrival)
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        claims = read_claim_log(args.postgres_dsn, schema)
        start = marks["start"]
        return {"dag parsed": marks["dag parsed"] - start, "execute": marks["execute"] - start,
                "first claim": claims[0]["at"] - start if claims else None,
                "first call": first_call - start}
    finally:
        if child is not None and child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        store.close()
        pg.drop_schema(schema)
        drop_namespace(router, namespace)
        router.close()


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # Ctrl-C or SIGTERM: the lead's process, the run's namespace and schema and the
    # simulator are stopped or dropped by the finally blocks below
    return interruptible(lambda: measure(args, argv))


def measure(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Every version ``--runs`` times, interleaved; print and save the phases."""
    profile = SimulatorProfile.default(time_scale=args.time_scale, seed=1)
    sim = SimulatorProcess(profile).start()
    results: dict[str, list[dict[str, float | None]]] = {name: [] for name in args.sources}
    try:
        for k in range(1, args.runs + 1):
            for name, src in args.sources.items():
                phases = one_run(args, src, sim, profile)
                results[name].append(phases)
                print(f"run {k} {name:>8}: " + "  ".join(
                    f"{p} {v:.3f}" for p, v in phases.items() if v is not None)
                    + f"  (load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        sim.stop()
    print("\nmedians, seconds from the task process's timed start:")
    for name, runs in results.items():
        medians = {p: statistics.median(r[p] for r in runs if r[p] is not None)  # type: ignore[type-var]
                   for p in PHASES if any(r[p] is not None for r in runs)}
        print(f"{name:>8}: " + "  ".join(f"{p} {v:.3f}" for p, v in medians.items()))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"lead-start-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}.json"
    path.write_text(json.dumps({"command": "python -m bench.lead_start " + " ".join(
        sys.argv[1:] if argv is None else argv), "results": results}, indent=1))
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
