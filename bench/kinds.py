"""Learned estimates per task kind against a static worst case: the same backlog of short
and long answers drained three ways on a token-bound model; on demand, not in CI.

    python -m bench.kinds                  # 400 prompts, each mode once (~1.5 minutes)
    python -m bench.kinds --write          # and rewrite its section of bench/out/benchmarks.md

The backlog: half ``summary:`` prompts (the simulator writes ~40 tokens), half ``essay:``
prompts (~800 tokens, up to ``--cap``), enqueued with their kind. One model whose tokens
per window bind (requests and concurrency are roomy). The modes differ only in what a call
reserves while it runs (its reservation is replaced by its actual tokens on completion):

- ``worst_case``: the backend connection's ``max_output_tokens`` = ``--cap``, so every call
  reserves input + cap (exact for a backend that caps output: nothing can exceed it);
- ``per_model``: no cap; the engine reserves the model's learned output (the 95th
  percentile of its recent calls, a mix of both kinds: close to the essays');
- ``per_kind``: no cap; the tasks' kinds reach the engine, which reserves each kind's own
  percentile.

Each run reports the makespan, calls in flight (mean over the drain, sampled from the
engine), the backend's 429s and its strict sliding-window check (``violations``: windows
whose actual tokens exceeded the limit). The learned modes reserve a percentile, not a
bound: a call that writes more than its kind's 95th percentile can take a window past the
limit once the actual tokens are counted (the residual risk, docs/engine.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack, suppress
from typing import Any

import httpx

from airflow_llm_router import DEFAULT_KIND
from airflow_llm_router.engine import RouterClient, RouterSettings
from bench.common import (
    BENCHMARKS_MD,
    add_run_options,
    drain_once,
    guarded,
    private_services,
    publish,
)
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.profile import ModelProfile

MODES = ("worst_case", "per_model", "per_kind")
HEADING = "## Estimates per task kind"
OUT = BENCHMARKS_MD


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.kinds", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--prompts", type=int, default=400, help="tasks, half of each kind")
    parser.add_argument("--tpm", type=int, default=12_000, help="the model's tokens per window")
    parser.add_argument("--cap", type=int, default=2000,
                        help="the longest answer (the worst case reserved per call)")
    add_run_options(parser, heading=HEADING, time_scale=60.0)
    return parser


def profile(opts: argparse.Namespace) -> SimulatorProfile:
    model = ModelProfile(name="m", median_s=20.0, sigma=0.3, min_s=5.0, max_s=60.0,
                         output_tokens_mean=400, output_tokens_sigma=0.4,
                         output_tokens_max=opts.cap, tpm=opts.tpm)
    return SimulatorProfile(time_scale=opts.time_scale, seed=opts.seed, models=[model],
                            output_scale_by_prefix={"summary:": 0.1, "essay:": 2.0})


async def _sample_in_flight(router: RouterClient, into: list[int], stop: asyncio.Event,
                            ) -> None:
    while not stop.is_set():
        stats = await asyncio.to_thread(router.stats)
        into.append(stats.models["m"].in_flight if "m" in stats.models else 0)
        with suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.05)


async def _drain(schema: str, prompts: int) -> dict[str, Any]:
    return await drain_once(schema, f"kinds-{schema}", timeout_s=600, claim_ttl_s=30,
                            claim_batch=200, max_in_flight=200)


def run_mode(opts: argparse.Namespace, mode: str) -> dict[str, Any]:
    """Drain the backlog once in ``mode``, on a private Redis, schema and simulator."""
    run_id = uuid.uuid4().hex[:8]
    schema, namespace = f"llmr_kinds_{run_id}", f"kinds-{run_id}"
    prof = profile(opts)
    with ExitStack() as stack:
        redis_server, sim, store = private_services(stack, opts.postgres_dsn, schema, prof)
        extra: dict[str, Any] = {"timeout_s": 60}
        if mode == "worst_case":
            extra["max_output_tokens"] = opts.cap
        os.environ.update({
            "AIRFLOW_CONN_LLM_ROUTER_DEFAULT": json.dumps(
                {"conn_type": "llm_router", "host": "127.0.0.1", "port": redis_server.port,
                 "extra": {"namespace": namespace, "lease_ttl_s": 30}}),
            "AIRFLOW_CONN_POSTGRES_DEFAULT": opts.postgres_dsn,
            "AIRFLOW_CONN_MODELS_BACKEND_DEFAULT": json.dumps(
                {"conn_type": "models_backend", "host": sim.url, "extra": extra}),
        })
        store.migrate()
        half = opts.prompts // 2
        kinds = mode == "per_kind"
        store.enqueue([f"summary: record {i}" for i in range(half)],
                      kind="summary" if kinds else DEFAULT_KIND)
        store.enqueue([f"essay: topic {i}" for i in range(opts.prompts - half)],
                      kind="essay" if kinds else DEFAULT_KIND)
        router = RouterClient.from_url(redis_server.url, RouterSettings(namespace=namespace))
        stack.callback(router.close)
        router.set_quota("m", {"rpm": 100_000, "tpm": opts.tpm, "max_concurrency": 1000,
                               "window_s": prof.scaled_window_s,
                               "expected_output_tokens": 400})

        async def go() -> tuple[dict[str, Any], float, list[int]]:
            samples: list[int] = []
            stop = asyncio.Event()
            sampler = asyncio.create_task(_sample_in_flight(router, samples, stop))
            started = time.monotonic()
            event = await _drain(schema, opts.prompts)
            took = time.monotonic() - started
            stop.set()
            await sampler
            return event, took, samples

        event, took, samples = asyncio.run(go())
        served = httpx.get(f"{sim.url}/stats", timeout=10).json()
        stats = router.stats().models["m"]
        counts = store.counts()
    model = served["models"]["m"]
    totals = served["totals"]
    return {
        "mode": mode, "status": event.get("status"), "solved": counts.get("solved", 0),
        "makespan_s": round(took, 2), "windows": round(took / prof.scaled_window_s, 1),
        "mean_in_flight": round(statistics.mean(samples), 1) if samples else 0.0,
        "rejected_429": totals["rejected_429"], "violations": totals["violations"],
        "by_reason": model.get("violations"), "router": stats.counters,
        "peak_tokens_in_window": model.get("peak_accepted_tokens_in_window"),
        "output_tokens": model.get("output_tokens_accepted"),
        "excess_tokens": round(stats.excess_tokens, 1),
        "estimates": {"model": stats.output_estimate,
                      **{k: v.output_estimate for k, v in stats.kinds.items()}},
    }


def report(opts: argparse.Namespace, rows: list[dict[str, Any]]) -> str:
    base = next(r for r in rows if r["mode"] == "worst_case")["makespan_s"]
    lines = [
        HEADING, "",
        f"`python -m bench.kinds --prompts {opts.prompts} --tpm {opts.tpm} --cap {opts.cap}` "
        f"(run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; seed {opts.seed}, a "
        f"{60 / opts.time_scale:g} s window): {opts.prompts} prompts, "
        "half short summaries (~40 output tokens), half essays (~800, capped at "
        f"{opts.cap}), one model bound by {opts.tpm} tokens per window. What each call "
        "reserves while it runs is the only difference (see the module's docstring).", "",
        "| mode | makespan (s) | speed vs worst case | mean in flight | 429s (tpm) | "
        "peak tokens/window | reserved output (model; per kind) | mean excess at the end |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        est = r["estimates"]
        kinds = "; ".join(f"{k} {v}" for k, v in est.items() if k != "model")
        reserved = (f"{opts.cap} (cap)" if r["mode"] == "worst_case"
                    else f"{est['model']}" + (f"; {kinds}" if kinds else ""))
        lines.append(
            f"| {r['mode']} | {r['makespan_s']} | {base / r['makespan_s']:.2f}x | "
            f"{r['mean_in_flight']} | {r['rejected_429']} | "
            f"{r['peak_tokens_in_window']} / {opts.tpm} | {reserved} | "
            f"{r.get('excess_tokens', 0.0)} |")
    by = {r["mode"]: r for r in rows}
    worst, model, kind = by["worst_case"], by["per_model"], by["per_kind"]
    lines += [
        "",
        f"Per kind, the short answers reserve what they use: {kind['mean_in_flight']} calls "
        f"in flight on average against {worst['mean_in_flight']} under the worst case "
        f"({kind['mean_in_flight'] / max(worst['mean_in_flight'], 0.1) - 1:+.0%}), a "
        f"makespan {1 - kind['makespan_s'] / worst['makespan_s']:.0%} shorter. A strict "
        "provider refuses what would take a window past its limit, so no window at the "
        "backend goes over (its peak stays under the limit); the 429s count the calls the "
        "router sent that it had to refuse: an answer longer than its reservation "
        "(above the percentile) overruns the router's count by its excess while it runs; "
        "the engine adds the mean excess it has seen to every reservation it estimates. "
        f"Learned per kind, that cost {kind['rejected_429']} 429s in "
        f"{opts.prompts} calls; learned per model {model['rejected_429']}; the worst "
        "case none, as an output cap makes the reservation exact.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if opts.prompts < 2 or opts.tpm < opts.cap + 100:
        print("error: --prompts must be >= 2 and --tpm larger than --cap + 100 (one call "
              "must fit a window)", file=sys.stderr)
        return 2
    rows = []

    def run_all() -> int:
        for mode in MODES:
            print(f"{mode}: draining {opts.prompts} prompts...", flush=True)
            rows.append(run_mode(opts, mode))
            print(json.dumps(rows[-1]), flush=True)
        return 0

    status = guarded(run_all)
    if status:
        return status
    publish(report(opts, rows), HEADING, OUT, opts.write)
    if opts.out:
        opts.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
