"""The governed endpoint's overhead over calling the backend directly; on demand, not in CI.

    python -m bench.endpoint_overhead                       # ~1 minute
    python -m bench.endpoint_overhead --rounds 5 --seconds 4 --clients 100 --rate 50

Parts, each real and in its own process: the simulator's OpenAI face with (near) zero model
latency, a private ``redis-server`` and the standalone server (``python -m
airflow_llm_router.web --backend-conn-id``, one uvicorn process, a deployment's defaults),
its model's quota roomy so that nothing waits for room. The same ``aiohttp`` clients send
the same chat completion (``max_tokens`` set, not streamed) either to the simulator
(direct) or to the endpoint (governed), the two interleaved round by round (the order
alternating) so both see the same machine load. Each round runs three phases per path:

- ``serial``: one client, one call at a time: the overhead per call with no queueing;
- ``rate``: ``--clients`` clients offering ``--rate`` calls/s in all (each client sends its
  next call at its schedule or when its previous call ends, whichever is later): the
  latency overhead at a load both paths can carry;
- ``closed``: ``--clients`` clients each sending its next call as the previous one ends:
  the calls/s each path sustains (at 100 closed-loop clients latency is queueing, 100 /
  calls/s, so its p50 difference measures throughput, not overhead).

Reported per phase and path: p50/p99 and, for the endpoint, their differences from direct
(pooled over the rounds, and the median of the rounds' differences), calls/s, non-200
answers, the CPU per call of the process serving the path (the simulator's, the API's:
``/proc``) and the share of a core it got (``cores``: what binds on a loaded machine), the
Redis round trips per call (the private Redis's ``evalsha`` count from ``INFO
commandstats``: admission, send stamp, settlement, merged across concurrent calls);
the load average at the start. ``--versus`` adds another checkout's server as a third
path, to A/B two versions in one run. Raw results:
``bench/out/<UTC time>-endpoint-overhead/``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
import redis

from airflow_llm_router.engine import RouterClient, RouterSettings
from bench.common import OUT_DIR, guarded, results_dir
from bench.proc_cpu import cpu_s
from llm_router_devkit.api_server import api_env, standalone_api
from llm_router_devkit.redis_tools import PrivateRedis
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.simulator.faces import face_connection
from llm_router_devkit.simulator.profile import ModelProfile
from llm_router_devkit.simulator.server import SimulatorProcess
from llm_router_devkit.stack_processes import descendants

MODEL = "m"
BODY = {"model": MODEL, "max_tokens": 32,
        "messages": [{"role": "system", "content": "Answer briefly."},
                     {"role": "user", "content": "Summarise the ticket in one line, please."}]}
PHASES = ("serial", "rate", "closed")


def _profile() -> SimulatorProfile:
    """One model answering in 0.1 ms (the sleep only), no provider limit."""
    model = ModelProfile(name=MODEL, median_s=1e-4, min_s=1e-4, max_s=1e-4, tail_rate=0,
                         output_tokens_mean=16, output_tokens_max=32)
    return SimulatorProfile(time_scale=1, seed=1, models=[model])


async def _load(url: str, headers: dict[str, str], clients: int, seconds: float,
                rate: float | None) -> dict[str, Any]:
    """``clients`` clients sending ``BODY`` to ``url`` for ``seconds``: each call's latency
    (ms) and the non-200 answers. ``rate``: calls/s offered in all (None: closed loop)."""
    latencies: list[float] = []
    bad: dict[str, int] = {}
    payload = json.dumps(BODY).encode()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, headers={
            **headers, "Content-Type": "application/json"}) as session:
        start = time.monotonic() + 0.05
        end = start + seconds

        async def client(i: int) -> None:
            gap = clients / rate if rate else 0.0
            due = start + (i * gap / clients if rate else 0.0)
            while True:
                now = time.monotonic()
                if max(due, now) >= end:  # not even a sleep past the end: calls/s
                    return
                if due > now:
                    await asyncio.sleep(due - now)
                sent = time.monotonic()
                async with session.post(url, data=payload) as response:
                    await response.read()
                    status = response.status
                latencies.append((time.monotonic() - sent) * 1000)
                if status != 200:
                    bad[str(status)] = bad.get(str(status), 0) + 1
                due = max(due + gap, time.monotonic()) if rate else 0.0

        began = time.monotonic()
        await asyncio.gather(*(client(i) for i in range(clients)))
        took = time.monotonic() - began
    return {"latencies_ms": latencies, "non_200": bad, "seconds": took,
            "calls_per_s": len(latencies) / max(took, 1e-9)}


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _redis_commands(client: redis.Redis) -> dict[str, int]:
    stats: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def _server(url: str) -> int:
    """The process this one started that listens on ``url``'s port (from /proc)."""
    port = f"{int(url.rsplit(':', 1)[1]):04X}"
    inodes = {f"socket:[{f[9]}]" for f in (line.split() for line in
              Path("/proc/net/tcp").read_text().splitlines()[1:])
              if f[1].endswith(":" + port) and f[3] == "0A"}
    for pid in descendants(os.getpid()):
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) in inodes for fd in Path(f"/proc/{pid}/fd").iterdir()):
                return pid
    raise RuntimeError(f"no process started by this one listens on {url}")


def _cpu_s(pid: int) -> float:
    """CPU seconds ``pid`` has used (user + system); it must still run."""
    spent = cpu_s(pid)
    if spent is None:
        raise RuntimeError(f"process {pid} ended during the run")
    return spent


def _phase(opts: argparse.Namespace, name: str, url: str, token: str,
           server: int, rdb: redis.Redis) -> dict[str, Any]:
    """One phase on one path: the load's results, the CPU per call of the process serving
    it and of this one (the clients), and the Redis commands and connections it cost."""
    clients = 1 if name == "serial" else opts.clients
    rate = opts.rate if name == "rate" else None
    cpu0, bench0, cmds0 = _cpu_s(server), _cpu_s(os.getpid()), _redis_commands(rdb)
    conns0 = int(rdb.info("stats")["total_connections_received"])
    result = asyncio.run(_load(url + "/v1/chat/completions",
                               {"Authorization": f"Bearer {token}"}, clients, opts.seconds,
                               rate))
    calls = max(len(result["latencies_ms"]), 1)
    cmds = {k: v - cmds0.get(k, 0) for k, v in _redis_commands(rdb).items()}
    result.update(
        server_cpu_ms_per_call=(_cpu_s(server) - cpu0) * 1000 / calls,
        server_cores=(_cpu_s(server) - cpu0) / max(result["seconds"], 1e-9),
        bench_cpu_ms_per_call=(_cpu_s(os.getpid()) - bench0) * 1000 / calls,
        redis_round_trips_per_call=round(cmds.get("evalsha", 0) / calls, 3),
        redis_connections_opened=int(rdb.info("stats")["total_connections_received"])
        - conns0)
    return result


def _summary(rounds: list[dict[str, dict[str, Any]]], phases: Sequence[str],
             paths: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for phase in phases:
        each: dict[str, Any] = {}
        for path in paths:
            runs = [r[f"{phase}/{path}"] for r in rounds]
            pooled = [x for run in runs for x in run["latencies_ms"]]
            each[path] = {
                "p50_ms": _pct(pooled, 0.5), "p99_ms": _pct(pooled, 0.99),
                "calls_per_s": statistics.median(run["calls_per_s"] for run in runs),
                "calls_per_s_runs": [round(run["calls_per_s"]) for run in runs],
                "server_cpu_ms_per_call": statistics.median(
                    run["server_cpu_ms_per_call"] for run in runs),
                "server_cores": statistics.median(run["server_cores"] for run in runs),
                "bench_cpu_ms_per_call": statistics.median(
                    run["bench_cpu_ms_per_call"] for run in runs),
                "redis_round_trips_per_call": statistics.median(
                    run["redis_round_trips_per_call"] for run in runs),
                "redis_connections_opened": sum(run["redis_connections_opened"]
                                                for run in runs),
                "non_200": sum(sum(run["non_200"].values()) for run in runs)}
            if path != "direct":
                for q in ("p50", "p99"):
                    each[path][f"overhead_{q}_ms"] = each[path][f"{q}_ms"] - \
                        each["direct"][f"{q}_ms"]
                    each[path][f"overhead_{q}_ms_round_median"] = statistics.median(
                        _pct(r[f"{phase}/{path}"]["latencies_ms"], int(q[1:]) / 100)
                        - _pct(r[f"{phase}/direct"]["latencies_ms"], int(q[1:]) / 100)
                        for r in rounds)
        out[phase] = each
    return out


def _print(summary: dict[str, Any], opts: argparse.Namespace, load: tuple[float, ...]) -> None:
    print(f"load average at start {load[0]:.1f}; {opts.rounds} rounds of {opts.seconds:g} s "
          f"per phase and path; {opts.clients} clients, rate phase {opts.rate:g} calls/s")
    for phase, each in summary.items():
        for path, s in each.items():
            extra = "" if path == "direct" else (
                f" | overhead p50 {s['overhead_p50_ms']:+.2f} p99 {s['overhead_p99_ms']:+.2f}"
                f" ms (round medians {s['overhead_p50_ms_round_median']:+.2f} / "
                f"{s['overhead_p99_ms_round_median']:+.2f}) | Redis round trips/call "
                f"{s['redis_round_trips_per_call']:.2f}")
            print(f"{phase:>6} {path:>8}: p50 {s['p50_ms']:7.2f} p99 {s['p99_ms']:7.2f} ms | "
                  f"{s['calls_per_s']:5.0f} calls/s | server CPU "
                  f"{s['server_cpu_ms_per_call']:.2f} ms/call, {s['server_cores']:.2f} cores | "
                  f"non-200 {s['non_200']}{extra}")


def _api(stack: ExitStack, env: dict[str, str], home: Path, root: Path | None) -> str:
    """Start the standalone server (from ``root``'s checkout if given); its base URL."""
    if root is not None:
        env = {**env, "PYTHONPATH": str(root)}
    return str(stack.enter_context(standalone_api(
        env, ["--token-conn-id", "llmr_token", "--conn-id", "llmr_router",
              "--backend-conn-id", "llmr_backend"],
        home / f"api-{'versus' if root else 'governed'}.log")))


def run(opts: argparse.Namespace, argv: Sequence[str] | None) -> int:
    out, command, started = results_dir(OUT_DIR, "endpoint-overhead",
                                        "bench.endpoint_overhead", argv)
    token, namespace = secrets.token_urlsafe(24), f"overhead-{uuid.uuid4().hex[:8]}"
    load = os.getloadavg()
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="llmr-overhead-") as home:
        redis_server = PrivateRedis()
        redis_server.start()
        stack.callback(redis_server.close)
        sim = stack.enter_context(SimulatorProcess(_profile()))
        env = api_env(Path(home), {
            "llmr_router": {"conn_type": "llm_router", "host": "127.0.0.1",
                            "port": redis_server.port, "extra": {"namespace": namespace}},
            "llmr_token": {"conn_type": "generic", "password": token},
            "llmr_backend": face_connection(sim.url, "openai", timeout_s=30)})
        router = RouterClient.from_url(redis_server.url, RouterSettings(namespace=namespace))
        stack.callback(router.close)
        router.set_quota(MODEL, {"rpm": 10**7, "tpm": 10**9, "max_concurrency": 10**5})
        urls = {"direct": sim.url, "governed": _api(stack, env, Path(home), None)}
        if opts.versus is not None:
            urls["versus"] = _api(stack, env, Path(home), opts.versus)
        servers = {path: _server(url) for path, url in urls.items()}
        rdb = redis.Redis.from_url(redis_server.url)
        stack.callback(rdb.close)
        for url in urls.values():  # warm each path (connections, the engine's scripts)
            asyncio.run(_load(url + "/v1/chat/completions",
                              {"Authorization": f"Bearer {token}"}, opts.clients, 1.0, None))
        paths = list(urls)
        rounds: list[dict[str, dict[str, Any]]] = []
        for i in range(opts.rounds):
            order = paths[i % len(paths):] + paths[:i % len(paths)]
            rounds.append({f"{phase}/{path}": _phase(opts, phase, urls[path], token,
                                                     servers[path], rdb)
                           for phase in opts.phases for path in order})
    summary = _summary(rounds, opts.phases, paths)
    _print(summary, opts, load)
    (out / "runs.json").write_text(json.dumps(
        {"command": command, "started": started, "load_average": load, "summary": summary,
         "rounds": rounds}, indent=1))
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"results: {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.endpoint_overhead",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per phase and path")
    parser.add_argument("--clients", type=int, default=100, help="concurrent clients")
    parser.add_argument("--rate", type=float, default=100.0,
                        help="calls/s offered in all in the rate phase")
    parser.add_argument("--versus", type=Path, help="also run another checkout's server "
                        "(git worktree add /tmp/base main), interleaved: an A/B of two "
                        "versions")
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES),
                        help="which phases to run (default: all)")
    opts = parser.parse_args(argv)
    if opts.rounds < 1 or opts.clients < 1 or opts.seconds <= 0 or opts.rate <= 0:
        print("error: --rounds and --clients must be >= 1, --seconds and --rate above 0",
              file=sys.stderr)
        return 2
    return guarded(lambda: run(opts, argv))


if __name__ == "__main__":
    sys.exit(main())
