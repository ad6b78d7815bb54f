"""A workload's drain without Airflow: the routing alone, about a minute a run.

``python -m bench.e2e`` measures the product as deployed (scheduler, triggerer, mapped
solvers), two to three minutes a run with as much again of spread between runs. To compare
two versions of the routing, that is too slow to repeat enough. This runs the same
workload (W1-W4, ``bench/e2e/workloads.py``: the initial backlog, then W3's cut of the
busiest model's limits and W4's arrivals at their time after the first call, as
``bench.e2e`` fires them) through ``--drains`` ``DrainTrigger`` s in one process, on a
private Redis, the simulator (its own process) and a schema of its own, as many times as
asked, and prints per run:

- the makespan from the first call the backend received to the last answer written to the
  store (the drains' start-up, a second or two, and their closing left out: the
  yardstick's reference starts at its first send and ends at its last answer);
- the backend's 429s by model and reason (its own counters);
- the last answers: each one's model, when its call was sent and how long it took (the
  prompt's drawn latency there), to see what ended the run, and the same for every
  answered call with its kind (``calls`` in ``runs.json``: where each list's prompts went,
  and when);
- each model's calls per window (from the backend's timeline), against its rpm, and per
  second in ``runs.json`` (from the backend's reset, the first call's second included),
  and per 50 ms over the first 3 s from the first call (``calls_first_3s``: the first
  window's burst) and over the 3 s a window later (``calls_second_window_3s``: how
  closely the second window's calls follow the first's as those leave), and so for
  every window (``calls_window_starts_3s``: how far each window's burst has come
  behind the first's);
- each model's guard at the end, how often the engine widened it (a widened guard holds
  the next window's calls back, except those of calls answered with their receipt:
  ``receipts`` counts those) and the output tokens it reserves per call (``engine_end``);
- the CPU the run took in the private Redis (the engine's scripts; its process, read as
  ``bench.admission`` reads it) and in the drains' process (``cpu_s``).

The router runs at a deployment's defaults (no routing setting of its own: a unit test
holds every benchmark to that). Each run starts cold (a new namespace: the engine knows no
model's outputs or latencies, and admits at most 4 calls a model until its first
answer); ``--warm`` first makes one call per model and waits a window, as ``bench.e2e
--warm`` does, to measure the routing apart from that start.
``--root`` runs another checkout's provider (``git worktree add /tmp/base main``), so two
versions can be interleaved run by run on the same machine: the spread between runs is the
larger effect on a shared machine (its benchmark helpers too: a checkout from before
``bench/direct_events.py`` cannot be run so). The workload's events fire from a process of
their own (``bench/direct_events.py``). Results: ``bench/out/<UTC time>-direct/runs.json``,
which ``python -m bench.e2e.yardstick`` measures against each run's own yardstick.

    python -m bench.direct --workload W1 --runs 4
    python -m bench.direct --runs 4 --root /tmp/base   # the other version, interleave them
    python -m bench.direct --protocol openai           # through the simulator's OpenAI face
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # after PYTHONPATH: a --root run's checkout comes first
    sys.path.append(str(ROOT))

from bench.common import (  # noqa: E402
    DEFAULT_DSN,
    OUT_DIR,
    drain_once,
    guarded,
    private_services,
    results_dir,
)
from bench.direct_events import EventsSpec, WorkloadEvents  # noqa: E402

RESULTS = OUT_DIR
#: Bucket of the backend's timeline used to find the first call (s).
FIRST_CALL_BUCKET_S = 0.05
#: How many of the last answers a run reports (``ending``).
ENDING = 8


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.direct", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", choices=("W1", "W2", "W3", "W4"), default="W1")
    p.add_argument("--runs", type=int, default=1, help="runs, one after another")
    p.add_argument("--drains", type=int, default=2, help="DrainTriggers in the process")
    p.add_argument("--in-flight", type=int, default=400, help="each drain's max_in_flight")
    p.add_argument("--claim-batch", type=int, default=100,
                   help="each drain's claim_batch (the lead solver's start in its worker "
                        "claims as many as it keeps in flight)")
    p.add_argument("--no-hedge", action="store_true", help="hedge_late_calls off")
    p.add_argument("--warm", action="store_true",
                   help="one call per model through the router first, then a window's wait: "
                        "the engine starts with learned outputs and latencies (no cold start), "
                        "as in a deployment whose models have answered before")
    p.add_argument("--protocol", choices=("models_backend", "openai", "anthropic"),
                   default="models_backend",
                   help="the backend protocol, through the simulator's face for it "
                        "(docs/backends.md)")
    p.add_argument("--max-output-tokens", type=int, default=None,
                   help="the connection's output cap (required with --protocol anthropic)")
    p.add_argument("--time-scale", type=float, default=3.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    p.add_argument("--root", type=Path,
                   help="a checkout whose provider to run (default: this one)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="each run's limit")
    p.add_argument("--baseline", action="store_true",
                   help="record the runs as the workload's baseline (bench/baselines/"
                        "<workload>.json), the figure of docs/benchmarks.md's targets table "
                        "(then: python -m bench.targets --write)")
    return p


#: The options that change what a baseline measures: a refresh keeps its baseline's.
BASELINE_OPTIONS = ("workload", "drains", "in_flight", "claim_batch", "no_hedge", "warm",
                    "time_scale", "seed", "protocol", "max_output_tokens")


def baseline_mismatch(args: argparse.Namespace) -> str | None:
    """Why these runs cannot refresh the workload's baseline (None: they can): its
    reference holds for the options it was measured with."""
    from bench.baselines import DIR, load

    path = DIR / f"{args.workload.lower()}.json"
    if not path.is_file():
        return f"no baseline {path} for {args.workload}"
    old = load(path)
    theirs = _parser().parse_args(shlex.split(old.command)[3:])  # after python -m bench.direct
    differ = [f"--{k.replace('_', '-')}" for k in BASELINE_OPTIONS
              if getattr(theirs, k) != getattr(args, k)]
    if differ:
        return (f"{path} was measured with `{old.command}`; run with its "
                f"{', '.join(differ)} or without --baseline")
    return None


def record_baseline(args: argparse.Namespace, runs: list[dict[str, Any]], command: str) -> Path:
    """Write the runs' makespans and 429s as the workload's baseline."""
    from bench.baselines import Check, record

    n = len(runs)
    no_429 = Check("429s", max(r["rejected_429"] for r in runs), "<=", 0,
                   f"in {n} run{'s' if n > 1 else ''}")
    words = [w for w in shlex.split(command) if w != "--baseline"]
    return record(args.workload.lower(), [r["makespan_s"] for r in runs], shlex.join(words),
                  also=[no_429], root=args.root)


def backend_connection(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The backend connection of a run: the simulator's ``/single`` (written out, for a
    ``--root`` checkout's devkit), or its face for another protocol."""
    cap = {} if args.max_output_tokens is None else {"max_output_tokens": args.max_output_tokens}
    if args.protocol == "models_backend":
        return {"conn_type": "models_backend", "host": url,
                "extra": {"timeout_s": 300, **cap}}
    from llm_router_devkit.simulator.faces import face_connection

    return face_connection(url, args.protocol, timeout_s=300, **cap)


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    """One drain of the workload on fresh services; its figures."""
    import httpx
    import psycopg
    from psycopg import sql

    from airflow_llm_router.engine import RouterClient, RouterSettings
    from airflow_llm_router.quotas import QuotaStore
    from bench.admission.model import RedisCpu
    from bench.e2e.workloads import build
    from llm_router_devkit.demo.router_quotas import router_quotas
    from llm_router_devkit.demo.seed import seed_store
    from llm_router_devkit.simulator import SimulatorProfile

    profile = SimulatorProfile.default(time_scale=args.time_scale, seed=args.seed)
    workload = build(args.workload, args.seed, [m.name for m in profile.models])
    suffix = uuid.uuid4().hex[:8]
    schema, namespace = f"llmr_direct_{suffix}", f"direct-{suffix}"
    with ExitStack() as stack:
        redis_server, sim, store = private_services(stack, args.postgres_dsn, schema, profile)
        # written out, not devkit.demo's connection_env: a --root run imports that
        # checkout's devkit, which may predate any option added to it since
        os.environ.update({
            "AIRFLOW_CONN_LLM_ROUTER_DEFAULT": json.dumps(
                {"conn_type": "llm_router", "host": "127.0.0.1", "port": redis_server.port,
                 "extra": {"namespace": namespace, "quota_schema": schema}}),
            "AIRFLOW_CONN_POSTGRES_DEFAULT": args.postgres_dsn,
            "AIRFLOW_CONN_MODELS_BACKEND_DEFAULT": json.dumps(backend_connection(sim.url, args)),
        })
        store.migrate()
        router = RouterClient.from_url(redis_server.url, RouterSettings(namespace=namespace))
        stack.callback(router.close)
        quotas = QuotaStore(args.postgres_dsn, router, schema=schema)
        quotas.migrate()
        for model, quota in router_quotas(profile).items():
            quotas.put(model, quota, actor="bench.direct")
        seed_store(store, workload.initial)
        if args.warm:
            from bench.common import warm_up

            warm_up(router, sim.url, [m.name for m in profile.models],
                    workload.initial[0].prompt, profile.scaled_window_s)
        with httpx.Client(base_url=sim.url, timeout=60) as http:
            reset_at = time.time()  # at or before the backend's timeline starts
            http.post("/stats/reset").raise_for_status()
            redis_cpu = RedisCpu(router.redis)  # the private Redis is local: read in /proc
            redis_at = redis_cpu.read(router.redis)[1]
            own_cpu = time.process_time()
            started = time.time()
            events = WorkloadEvents(EventsSpec(sim.url, workload, profile, args.postgres_dsn,
                                               schema, redis_server.url, namespace))
            stack.callback(events.stop)
            events.start()

            async def drains() -> list[dict[str, Any]]:
                return await asyncio.gather(*[
                    drain_once(schema, f"direct-{k}", timeout_s=args.timeout_s,
                               max_in_flight=args.in_flight,
                               claim_batch=args.claim_batch,
                               hedge_late_calls=not args.no_hedge)
                    for k in range(args.drains)])

            finals = asyncio.run(drains())
            ended = time.time() - started
            cpu = {"redis": round(redis_cpu.read(router.redis)[1] - redis_at, 2),
                   "drains": round(time.process_time() - own_cpu, 2)}
            events.stop()
            engine = {m.model: {"guard_ms": m.guard_ms,
                                "guard_widened": m.counters.get("guard_widened", 0),
                                "receipts": m.counters.get("receipts", 0),
                                "output_estimate": m.output_estimate}
                      for m in router.stats().models.values()}
            stats = http.get("/stats").json()
            fine = http.get("/timeline", params={"bucket_s": FIRST_CALL_BUCKET_S}).json()
            window = http.get("/timeline", params={"bucket_s": profile.scaled_window_s}).json()
            second = http.get("/timeline", params={"bucket_s": 1.0}).json()
        counts = store.counts()
        with psycopg.connect(args.postgres_dsn) as conn:
            last = conn.execute(
                sql.SQL("SELECT extract(epoch FROM solved_at), model, prompt FROM {} "
                        "WHERE status = 'solved' ORDER BY solved_at DESC LIMIT %s")
                .format(sql.Identifier(schema, "tasks")), (ENDING,)).fetchall()
            every = conn.execute(
                sql.SQL("SELECT extract(epoch FROM solved_at), model, prompt, kind FROM {} "
                        "WHERE status = 'solved' ORDER BY id")
                .format(sql.Identifier(schema, "tasks"))).fetchall()
        last_answer = float(last[0][0]) - started if last else ended
    first = min((k for m in fine["models"].values() for k, n in enumerate(m["requests"]) if n),
                default=0) * FIRST_CALL_BUCKET_S
    for e in events.fired:  # a change's stamp from the first call: at or after the true one
        if "done_wall" in e:
            e["change_s"] = math.ceil((e.pop("done_wall") - reset_at - first) * 100) / 100
    # each window's first 3 s per 50 ms, the first two windows' whatever the run's length
    windows = max(2, math.ceil((last_answer - first) / profile.scaled_window_s))
    starts = [_start(fine, first + k * profile.scaled_window_s) for k in range(windows)]
    violations = {m: {r: n for r, n in (v.get("violations") or {}).items()
                      if n and r != "total"}
                  for m, v in stats["models"].items()}
    return {
        "makespan_s": round(last_answer - first, 2),
        "ending": _ending(profile, last, started + first), "wall_s": round(ended, 2),
        "first_call_s": round(first, 2), "counts": counts,
        "rejected_429": stats["totals"]["rejected_429"],
        "violations": {m: v for m, v in violations.items() if v},
        "calls_per_window": {m: v["requests"] for m, v in window["models"].items()
                             if any(v["requests"])},
        "calls_per_second": {m: v["requests"] for m, v in second["models"].items()
                             if any(v["requests"])},
        "calls_first_3s": starts[0],
        "calls_second_window_3s": starts[1],
        "calls_window_starts_3s": starts,
        "hedged": sum(int((e.get("summary") or {}).get("hedged") or 0) for e in finals),
        "cpu_s": cpu,
        "engine_end": engine,
        "warm": args.warm,
        "events": [e.get("status") for e in finals],
        "fired": events.fired,
        "calls": [{"kind": c[3], **r} for c, r in zip(every, _ending(
            profile, [(c[0], c[1], c[2]) for c in every], started + first), strict=True)],
    }


def _start(fine: dict[str, Any], first_s: float) -> dict[str, list[int]]:
    """Each model's calls per :data:`FIRST_CALL_BUCKET_S` over the run's first 3 s (from
    its first call): how fast the first window's burst went out."""
    k = round(first_s / FIRST_CALL_BUCKET_S)
    n = round(3.0 / FIRST_CALL_BUCKET_S)
    return {m: v["requests"][k:k + n] for m, v in fine["models"].items()
            if any(v["requests"][k:k + n])}


def _ending(profile: Any, last: list[tuple[Any, str, str]], zero: float
            ) -> list[dict[str, Any]]:
    """The last answers, latest first: each one's model, when its call was sent (its
    answer's time less the prompt's drawn latency on that model) and that latency, in
    seconds from the first call: which calls ended the run, and whether a faster model
    could have had them."""
    from llm_router_devkit.simulator.workload import draw

    specs = {m.name: m for m in profile.models}
    scale = profile.slowdown / profile.time_scale
    rows = []
    for at, model, prompt in last:
        latency = draw(profile, specs[model], prompt).latency_s * scale
        rows.append({"model": model, "sent_s": round(float(at) - zero - latency, 2),
                     "latency_s": round(latency, 2)})
    return rows


def _child(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """One run in a child process whose provider (and devkit, and benchmark helpers) are
    ``--root``'s: run as a script, so that checkout comes first on its path."""
    root = args.root.resolve()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "devkit")])}
    child = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child",
                              *argv], env=env, cwd=root, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = child.communicate()
    except BaseException:
        # Ctrl-C or SIGTERM here: the child stops its own services (Redis, simulator,
        # schema) on SIGINT; killing it outright would leave them running
        child.send_signal(signal.SIGINT)
        child.communicate(timeout=120)
        raise
    for line in stdout.splitlines():
        if line.startswith("RUN "):
            return dict(json.loads(line[4:]))
    tail = (stderr.strip().splitlines() or ["no output"])[-1]
    raise RuntimeError(f"the run on {args.root} failed: {tail}")


def _invalid(args: argparse.Namespace, child: bool) -> str | None:
    """What is wrong with the options (None: nothing), as the ``error:`` line says it."""
    if args.runs < 1 or args.drains < 1 or args.in_flight < 1 or args.claim_batch < 1:
        return "--runs, --drains, --in-flight and --claim-batch must be at least 1"
    if args.root and not (args.root / "airflow_llm_router" / "__init__.py").is_file():
        return (f"--root {args.root}: not a checkout of this project (no "
                "airflow_llm_router/ in it)")
    try:
        mismatch = baseline_mismatch(args) if args.baseline and not child else None
    except ValueError as err:
        mismatch = str(err)
    return f"--baseline: {mismatch}" if mismatch else None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    child = "--child" in argv
    args = _parser().parse_args([a for a in argv if a != "--child"])
    problem = _invalid(args, child)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.protocol == "anthropic" and args.max_output_tokens is None:
        print("error: --max-output-tokens is required with --protocol anthropic (its API "
              "requires max_tokens on every call); give the cap in tokens, e.g. 2048",
              file=sys.stderr)
        return 2

    def body() -> int:
        if child:
            import airflow_llm_router

            run = one_run(args)
            run["provider"] = str(Path(airflow_llm_router.__file__).parent)
            print("RUN " + json.dumps(run), flush=True)
            return 0
        runs = []
        for k in range(args.runs):
            run = _child(args, argv) if args.root else one_run(args)
            runs.append(run)
            print(f"run {k + 1}: makespan {run['makespan_s']} s from the first call to the "
                  f"last answer (drains returned at {run['wall_s']} s), 429s {run['rejected_429']} "
                  f"{run['violations'] or ''}, hedged {run['hedged']}, CPU "
                  f"{run.get('cpu_s') or '?'} s", flush=True)
            for e in run.get("fired") or []:
                if "error" in e:
                    print(f"  {e['event']} at {e['at_s']} s FAILED: {e['error']}", flush=True)
            if run.get("fired"):
                print(f"  events: {len(run['fired'])} fired, the first at "
                      f"{run['fired'][0]['at_s']} s after the first call", flush=True)
            if run.get("ending"):  # an older --root checkout does not report it
                print("  last answers: " + "; ".join(
                    f"{e['model']} sent {e['sent_s']} s, took {e['latency_s']} s"
                    for e in run["ending"][:4]), flush=True)
        spans = [r["makespan_s"] for r in runs]
        median = round(statistics.median(spans), 2)
        print(f"{args.workload}: median {median} s over {len(spans)} runs "
              f"({', '.join(map(str, spans))}); runs with a 429: "
              f"{sum(1 for r in runs if r['rejected_429'])}")
        out, command, when = results_dir(RESULTS, "direct", "bench.direct", argv)
        (out / "runs.json").write_text(json.dumps(
            {"command": command, "when": when, "root": str(args.root or ROOT),
             "workload": args.workload, "time_scale": args.time_scale, "seed": args.seed,
             "protocol": args.protocol, "runs": runs}, indent=1))
        print(f"wrote {out / 'runs.json'}")
        if args.baseline:
            print(f"wrote {record_baseline(args, runs, command)}; python -m bench.targets "
                  "--write puts it in docs/benchmarks.md")
        return 0

    return guarded(body)


if __name__ == "__main__":
    sys.exit(main())
