"""What the quota page and ``/advice`` cost as the number of models grows: a curve.

    python -m bench.surfaces [--models 10 100 1000] [--calls 40] [--history 300]

The HTTP app in process (httpx over ASGI: a server adds nothing that grows with models),
on a private ``redis-server`` and a private schema of the PostgreSQL at ``--dsn`` (the
quota store). For each number of models: every model's quota stored (``QuotaStore.put``,
as the quota page writes them) and one admission each, so every model has learned
estimates; then ``--history`` reads of ``/stats`` so the API process holds the counter
samples a page left open for a while would have left (it keeps up to 512); then, per
route, ``--calls`` reads timed from the client: ``GET /stats`` and ``GET /quotas`` (what
the page refreshes) and ``GET /advice`` (what a sensor, a drain start and the backlog
panel ask). A machine shared with other work inflates every figure alike: compare within
one run (the ratio column, against the fewest models).

Raw figures go to ``bench/out/surfaces.json``; a table is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import redis

from airflow_llm_router.engine import AsyncRouterClient, RouterClient, RouterSettings
from airflow_llm_router.quotas import QuotaStore
from airflow_llm_router.web import Lazy, QuotaService, create_app, token_access
from bench.common import DEFAULT_DSN, drop_schema, interruptible, write_raw
from bench.scale import HUGE, learn
from llm_router_devkit.redis_tools import PrivateRedis

OUT = Path(__file__).resolve().parent / "out"
ROUTES = ("/stats", "/quotas", "/advice?backlog=100000")


@dataclass
class Point:
    models: int
    route: str
    calls: int
    p50_ms: float
    p99_ms: float


def seed(url: str, dsn: str, schema: str, models: int) -> QuotaService:
    """A fresh namespace with ``models`` stored quotas and learned estimates."""
    redis.Redis.from_url(url).flushall()  # the private server: nothing of anyone else's
    router = RouterClient.from_url(url, RouterSettings(namespace="surfaces"))
    store = QuotaStore(dsn, router, schema=schema)
    store.migrate()
    for k in range(models):
        store.put(f"m{k}", HUGE, actor="bench")
    learn(router, models)
    return QuotaService(router, store)


async def measure(url: str, service: QuotaService, models: int, calls: int,
                  history: int) -> list[Point]:
    token = secrets.token_urlsafe(16)

    async def build() -> AsyncRouterClient:
        return AsyncRouterClient.from_url(url, RouterSettings(namespace="surfaces"))

    async def close(client: AsyncRouterClient) -> None:
        await client.aclose()

    source = Lazy(build, "the bench's Redis", close)
    app = create_app(access=token_access(token), router=source, service=lambda: service)
    points = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                                 headers={"Authorization": f"Bearer {token}"},
                                 timeout=120) as http:
        for _ in range(history):
            (await http.get("/stats")).raise_for_status()
        for route in ROUTES:
            took = []
            for _ in range(calls):
                start = time.perf_counter()
                (await http.get(route)).raise_for_status()
                took.append((time.perf_counter() - start) * 1000)
            took.sort()
            points.append(Point(models, route, calls, statistics.median(took),
                                took[min(len(took) - 1, int(len(took) * 0.99))]))
    await source.aclose()
    return points


def _row(p: Point, points: Sequence[Point]) -> str:
    base = next((b for b in points if b.route == p.route), p)
    return (f"{p.models:>6} {p.route:<24} {p.p50_ms:>9.1f} {p.p99_ms:>9.1f} "
            f"{p.p50_ms / base.p50_ms:>7.1f}x")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.surfaces",
                                description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--models", nargs="+", type=int, default=[10, 100, 1000])
    p.add_argument("--calls", type=int, default=40, help="timed reads per route and point")
    p.add_argument("--history", type=int, default=300,
                   help="untimed /stats reads first (the counter samples of an open page)")
    p.add_argument("--dsn", default=DEFAULT_DSN, help="PostgreSQL for the quota store (a private "
                   "schema, dropped after)")
    p.add_argument("--out", type=Path, default=OUT / "surfaces.json")
    args = p.parse_args(argv)
    if args.calls < 1 or args.history < 0 or min(args.models) < 1:
        print("error: --calls and each of --models must be >= 1, --history >= 0",
              file=sys.stderr)
        return 2
    server = PrivateRedis()
    server.start()
    schema = f"surfaces_{uuid.uuid4().hex[:8]}"
    points: list[Point] = []
    try:
        print(f"{'models':>6} {'route':<24} {'p50 ms':>9} {'p99 ms':>9} {'ratio':>8}")
        for models in args.models:
            drop_schema(args.dsn, schema)
            service = seed(server.url, args.dsn, schema, models)
            try:
                got = asyncio.run(measure(server.url, service, models, args.calls,
                                          args.history))
            finally:
                service.router.close()
            points += got
            for each in got:
                print(_row(each, points), flush=True)
    finally:
        drop_schema(args.dsn, schema)
        server.close()
    write_raw(args.out, {"history": args.history, "points": [asdict(x) for x in points]})
    return 0


if __name__ == "__main__":
    raise SystemExit(interruptible(main))
