"""LiteLLM's proxy router beside the router's governed endpoint, in front of the same strict
backend, on the same workload and the same per-model limits.

    export LLMR_LITELLM_VENV=$(bash scripts/litellm_venv.sh)
    python -m bench.litellm_side_by_side --calls 1500 --stream both

The backend is the devkit's simulator through its OpenAI face, at time scale 1 (LiteLLM
counts rpm and tpm per calendar minute, so the provider's window must be a real minute):
three models whose rpm and tpm it enforces exactly at each arrival (a 429 for any call
that would put a sliding window over a limit). In front of it, in turn:

- **litellm**: ``--replicas`` LiteLLM proxies, each a process, set up as LiteLLM documents
  rpm/tpm routing across instances: each model a deployment with the provider's ``rpm``
  and ``tpm``, ``routing_strategy: usage-based-routing-v2``, the instances sharing one
  Redis (``redis_host``/``redis_port``); nothing else is tuned;
- **router**: the standalone server's governed endpoint with ``--workers`` = replicas
  (processes on one socket, sharing the quotas through the same kind of Redis), each
  model's quota equal to the provider's limits over its 60 s window, every other setting
  a deployment's default.

The same client drives both: ``--clients`` concurrent callers take the calls (the models
interleaved) from one queue, send each to a replica in turn (``max_tokens`` set), read the
answer (or the stream to its end) and, on a 429 or a 5xx, wait what ``Retry-After`` says
(1 s without one, as the ``openai`` SDK would at most 60 s) and send it again, until every
call is answered. Per run:

- the backend's own 429s (what the limits cost the provider, retries included);
- calls over a window's rpm: arrivals at the backend (admitted or refused) that end a
  sliding window, at the timeline's 50 ms resolution, holding more than the model's rpm:
  what the side sent beyond the limit;
- the 429s the clients saw (ours: a call that waited ``--max-wait-s`` for room);
- the makespan, from the first send to the last answer, as a share of the work over the
  limits (each model's calls over its rpm and accepted tokens over its tpm, in windows,
  for the model that binds). Sliding windows let a run beat that: the last window's calls
  can be sent as soon as the window before them has passed, the *earliest last send*.

Raw output: ``bench/out/<UTC time>-litellm/runs.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import secrets
import sys
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.common import interruptible, results_dir
from llm_router_devkit.api_server import api_env, standalone_api
from llm_router_devkit.litellm_proxy import LiteLLMProxy, litellm_executable
from llm_router_devkit.redis_tools import PrivateRedis
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.faces import face_connection
from llm_router_devkit.simulator.profile import ModelProfile
from llm_router_devkit.simulator.server import SimulatorProcess

OUT = Path(__file__).parent / "out"
WINDOW_S = 60.0
#: the models, their share of the calls and their limits: each bound at the same point
MODELS = {"large": (0.2, 100), "medium": (0.3, 150), "small": (0.5, 250)}
MAX_TOKENS = 200
TPM_PER_CALL = 250  # the provider's tpm allows this many tokens per call at full rpm
SIDES = ("litellm", "router")
#: the quota's concurrency where the provider states none (a quota requires one)
NO_CONCURRENCY_LIMIT = 10_000


def profile(seed: int) -> SimulatorProfile:
    """The strict backend: answers of 0.5-3 s, about 100 output tokens, exact limits."""
    return SimulatorProfile(time_scale=1.0, seed=seed, models=[
        ModelProfile(name=name, median_s=1.0, sigma=0.5, min_s=0.5, max_s=3.0,
                     output_tokens_mean=100, output_tokens_max=MAX_TOKENS, rpm=rpm,
                     tpm=rpm * TPM_PER_CALL)
        for name, (_, rpm) in MODELS.items()])


def workload(calls: int) -> list[tuple[str, str]]:
    """(model, prompt) of every call, the models interleaved in proportion."""
    out: list[tuple[str, str]] = []
    for name, (share, _) in MODELS.items():
        out += [(name, f"{name} call {i}: summarise record {i}. " + "lorem ipsum " * (i % 9))
                for i in range(round(calls * share))]
    out.sort(key=lambda mp: (int(mp[1].split()[2].rstrip(":")) / MODELS[mp[0]][0], mp[0]))
    return out


def litellm_config(sim_url: str, redis: PrivateRedis) -> dict[str, Any]:
    """LiteLLM's documented rpm/tpm routing across instances that share Redis."""
    return {
        "model_list": [{"model_name": name, "litellm_params": {
            "model": f"openai/{name}", "api_base": f"{sim_url}/v1", "api_key": "unused",
            "rpm": rpm, "tpm": rpm * TPM_PER_CALL}} for name, (_, rpm) in MODELS.items()],
        "router_settings": {"routing_strategy": "usage-based-routing-v2",
                            "redis_host": "127.0.0.1", "redis_port": redis.port},
    }


@dataclass
class Tally:
    """What the clients saw."""

    statuses: Counter[str] = field(default_factory=Counter)
    first_send: float = math.inf
    last_answer: float = 0.0
    tokens: int = 0


async def one_call(http: httpx.AsyncClient, url: str, key: str, model: str, prompt: str,
                   stream: bool, tally: Tally) -> None:
    """Send until answered; a 429 or 5xx waits its Retry-After (1 s without)."""
    body: dict[str, Any] = {"model": model, "max_tokens": MAX_TOKENS, "stream": stream,
                            "messages": [{"role": "user", "content": prompt}]}
    if stream:
        body["stream_options"] = {"include_usage": True}
    headers = {"Authorization": f"Bearer {key}"}
    while True:
        tally.first_send = min(tally.first_send, time.monotonic())
        try:
            async with http.stream("POST", f"{url}/chat/completions", json=body,
                                   headers=headers) as answer:
                text = (await answer.aread()).decode(errors="replace")
                status = answer.status_code
                wait = float(answer.headers.get("retry-after") or 1.0)
        except httpx.HTTPError as err:
            tally.statuses[type(err).__name__] += 1
            await asyncio.sleep(1.0)
            continue
        tally.statuses[str(status)] += 1
        if status == 200 and ("[DONE]" in text if stream else '"choices"' in text):
            tally.last_answer = max(tally.last_answer, time.monotonic())
            return
        await asyncio.sleep(min(wait, 60.0))


async def drive(urls: list[str], key: str, calls: list[tuple[str, str]], clients: int,
                stream: bool) -> Tally:
    """Every call answered, by ``clients`` callers sending to ``urls`` in turn."""
    tally = Tally()
    queue: asyncio.Queue[tuple[int, str, str]] = asyncio.Queue()
    for i, (model, prompt) in enumerate(calls):
        queue.put_nowait((i, model, prompt))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:

        async def caller() -> None:
            while not queue.empty():
                i, model, prompt = queue.get_nowait()
                await one_call(http, urls[i % len(urls)], key, model, prompt, stream, tally)

        await asyncio.gather(*(caller() for _ in range(clients)))
    return tally


def calls_over(arrivals: list[int], per_window: int, rpm: int) -> int:
    """Of ``arrivals`` per bucket (a window is ``per_window`` buckets), the calls that end a
    window holding more than ``rpm``: in each bucket, those past the limit."""
    over = held = 0
    for i, n in enumerate(arrivals):
        held += n - (arrivals[i - per_window] if i >= per_window else 0)
        if n and held > rpm:
            over += min(n, held - rpm)
    return over


def over_rpm(sim_url: str, bucket_s: float = 0.05) -> dict[str, int]:
    """Per model, the arrivals (admitted or refused) that end a window holding more than
    the model's rpm, from the backend's timeline at ``bucket_s`` resolution."""
    data = httpx.get(f"{sim_url}/timeline", params={"bucket_s": bucket_s}, timeout=60).json()
    out = {}
    for name, (_, rpm) in MODELS.items():
        m = data["models"][name]
        arrivals = [a + r for a, r in zip(m["requests"], m["rejected"], strict=True)]
        out[name] = calls_over(arrivals, round(WINDOW_S / bucket_s), rpm)
    return out


def bound_s(calls: list[tuple[str, str]], sim_stats: dict[str, Any]) -> float:
    """The work over the limits: each model's calls over its rpm and accepted tokens over its
    tpm, in windows; the largest, in seconds."""
    count = Counter(model for model, _ in calls)
    worst = 0.0
    for name, (_, rpm) in MODELS.items():
        tokens = sim_stats["models"][name]["tokens_accepted"]
        worst = max(worst, count[name] / rpm, tokens / (rpm * TPM_PER_CALL))
    return worst * WINDOW_S


def earliest_last_send_s(calls: list[tuple[str, str]]) -> float:
    """When the last call can be sent at the earliest under sliding windows: a model's rpm
    at 0, its next rpm one window later, ... (the work over the limits, less the last
    window, which need not pass: so a run can beat :func:`bound_s`)."""
    count = Counter(model for model, _ in calls)
    return max((math.ceil(count[name] / rpm) - 1) * WINDOW_S
               for name, (_, rpm) in MODELS.items())


def one_run(side: str, stream: bool, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    calls = workload(args.calls)
    with ExitStack() as stack:
        redis = PrivateRedis()
        redis.start()
        stack.callback(redis.close)
        sim = stack.enter_context(SimulatorProcess(profile(args.seed)))
        if side == "litellm":
            proxies = [stack.enter_context(LiteLLMProxy(litellm_config(sim.url, redis)))
                       for _ in range(args.replicas)]
            urls, key = [p.url for p in proxies], proxies[0].master_key
        else:
            key = secrets.token_urlsafe(16)
            env = api_env(out / "airflow-home", {
                "llmr_bench_router": {"conn_type": "llm_router", "host": "127.0.0.1",
                                      "port": redis.port,
                                      "extra": {"namespace": "side-by-side"}},
                "llmr_bench_token": {"conn_type": "generic", "password": key},
                "llmr_bench_backend": face_connection(sim.url, "openai", timeout_s=60)})
            log = out / f"api-{'stream' if stream else 'plain'}.log"
            urls = [stack.enter_context(standalone_api(
                env, ["--token-conn-id", "llmr_bench_token", "--conn-id", "llmr_bench_router",
                      "--backend-conn-id", "llmr_bench_backend",
                      "--workers", str(args.replicas)], log)) + "/v1"]
            set_quotas(redis.url)
        httpx.post(f"{sim.url}/stats/reset", timeout=30)
        tally = asyncio.run(drive(urls, key, calls, args.clients, stream))
        stats = httpx.get(f"{sim.url}/stats", timeout=30).json()
        over = over_rpm(sim.url)
    makespan = tally.last_answer - tally.first_send
    bound = bound_s(calls, stats)
    return {"side": side, "stream": stream, "calls": len(calls), "makespan_s": makespan,
            "bound_s": bound, "share_of_bound": bound / makespan,
            "earliest_last_send_s": earliest_last_send_s(calls),
            "backend_429": stats["totals"]["rejected_429"],
            "backend_requests": stats["totals"]["requests"],
            "calls_over_rpm_window": sum(over.values()), "over_by_model": over,
            "client_statuses": dict(tally.statuses),
            "backend_models": {n: {k: m[k] for k in ("requests", "accepted", "rejected_429",
                                                     "violations", "tokens_accepted")}
                               for n, m in stats["models"].items()}}


def set_quotas(redis_url: str) -> None:
    """Each model's quota: the provider's limits over its window (what a deployment sets)."""
    from airflow_llm_router.engine import RouterClient, RouterSettings

    engine = RouterClient.from_url(redis_url, RouterSettings(namespace="side-by-side"))
    try:
        for name, (_, rpm) in MODELS.items():
            engine.set_quota(name, {"rpm": rpm, "tpm": rpm * TPM_PER_CALL,
                                    "max_concurrency": NO_CONCURRENCY_LIMIT,
                                    "window_s": WINDOW_S})
    finally:
        engine.close()


def table(runs: list[dict[str, Any]]) -> str:
    lines = ["| side | stream | calls | backend 429s | calls over a window's rpm | "
             "client 429s | makespan | work / limits | % of it | earliest last send |",
             "|---" * 10 + "|"]
    for r in runs:
        lines.append(
            f"| {r['side']} | {'yes' if r['stream'] else 'no'} | {r['calls']} | "
            f"{r['backend_429']} | {r['calls_over_rpm_window']} | "
            f"{r['client_statuses'].get('429', 0)} | {r['makespan_s']:.1f} s | "
            f"{r['bound_s']:.1f} s | {100 * r['share_of_bound']:.1f} % | "
            f"{r['earliest_last_send_s']:.0f} s |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--clients", type=int, default=150, help="concurrent callers")
    parser.add_argument("--replicas", type=int, default=3,
                        help="LiteLLM proxies, and the endpoint's worker processes")
    parser.add_argument("--stream", choices=("no", "yes", "both"), default="both")
    parser.add_argument("--sides", default=",".join(SIDES), help="litellm,router")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    sides = args.sides.split(",")
    if args.calls < 10 or args.clients < 1 or args.replicas < 1 or set(sides) - set(SIDES):
        print("error: --calls must be >= 10, --clients and --replicas >= 1, --sides a "
              f"comma-separated list of {', '.join(SIDES)}", file=sys.stderr)
        return 2
    if "litellm" in sides:
        try:
            litellm_executable()
        except RuntimeError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    out, command, _ = results_dir(OUT, "litellm", "bench.litellm_side_by_side", argv)
    streams = {"no": [False], "yes": [True], "both": [False, True]}[args.stream]

    def body() -> int:
        runs = []
        for stream in streams:
            for side in sides:
                runs.append(one_run(side, stream, args, out))
                print(table(runs[-1:]).splitlines()[-1], flush=True)
                (out / "runs.json").write_text(json.dumps(
                    {"command": command, "runs": runs}, indent=1))
        print(table(runs))
        print(f"raw: {out / 'runs.json'}")
        return 0

    return interruptible(body)


if __name__ == "__main__":
    raise SystemExit(main())
