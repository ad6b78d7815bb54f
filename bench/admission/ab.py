"""``python -m bench.admission.ab --base REV [--head REV]``: what a change to the admission
scripts costs.

The admit and complete scripts of git revision ``REV`` (A) and of the working tree or
``--head`` (B) run
in turn on one Redis, in small interleaved blocks (A B, then B A, ...), each on a namespace
of its own with the same 10 roomy quotas: every caller loop admits and settles. Machine
load (other engineers' tests on a shared machine) then hits both alike, and the paired
difference of each block with its neighbour cancels most drift. Reported: Redis's own time
in the scripts per admission (``INFO commandstats``, admit + complete) and the client's
wall time, the median of the paired differences with their quartiles, and each side's
median and minimum. Only the two scripts differ between A and B: the client, the
arguments and the Redis are the same, but for the keys each side's scripts are given: the
prefix alone for scripts that derive every key from it (before every key was declared),
else every key they touch (the router-wide ones, and the per-model keys of each model the
call may touch: all of ``--models`` for an admission to any model).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

import redis

from airflow_llm_router.engine import AdmitRequest, ModelQuota, RouterSettings
from airflow_llm_router.engine.core import RouterCore
from airflow_llm_router.engine.encoding import Completion, encode_completion, encode_request
from airflow_llm_router.engine.keys import lease_model
from bench.common import interruptible

ROOT = Path(__file__).resolve().parents[2]
OPS = ("admit", "complete", "set_quota")
_DUMP = ("import json, sys; from airflow_llm_router.engine import scripts as s, keys as k; "
         "json.dump({'ops': {op: [s.script_source(op), list(s.model_keys(op)) "
         "if hasattr(s, 'model_keys') else None] for op in sys.argv[1:]}, "
         "'router': list(k.ROUTER_KEYS.values()), "
         "'model': getattr(k, 'MODEL_KEYS', {})}, sys.stdout)")

#: op -> (its script, the per-model keys it declares or None for the prefix alone)
Sources = dict[str, tuple[str, list[str] | None]]


@dataclass(frozen=True)
class Version:
    """The scripts of one version and the key layout they bind from ``KEYS``: its
    router-wide key suffixes and per-model key infixes, in its own order (a version that
    adds a router-wide key moves where every per-model key starts)."""

    sources: Sources
    router: tuple[str, ...]
    model: dict[str, str]

    def keys(self, prefix: str, op: str, models: list[str]) -> list[str]:
        declared = self.sources[op][1]
        if declared is None:
            return [prefix]
        return ([prefix + suffix for suffix in self.router]
                + [prefix + self.model[name] + m for m in models for name in declared])


def sources_at(where: str | None) -> Version:
    """The scripts as assembled in ``where``: a git revision, a directory holding an
    ``airflow_llm_router`` package, or None for the working tree; read in a fresh process.
    Each with the per-model keys it declares, or None if it is given the prefix alone."""
    with tempfile.TemporaryDirectory() as tmp:
        root = ROOT
        if where is not None and Path(where, "airflow_llm_router").is_dir():
            root = Path(where)
        elif where is not None:
            archive = subprocess.run(["git", "archive", where, "airflow_llm_router"], cwd=ROOT,
                                     check=True, capture_output=True).stdout
            with tarfile.open(fileobj=BytesIO(archive)) as tar:
                tar.extractall(tmp, filter="data")
            root = Path(tmp)
        out = subprocess.run([sys.executable, "-c", _DUMP, *OPS], cwd=root, check=True,
                             capture_output=True, text=True,
                             env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}).stdout
    doc: dict[str, Any] = json.loads(out)
    return Version({op: (src, keys) for op, (src, keys) in doc["ops"].items()},
                   tuple(doc["router"]), dict(doc["model"]))


class Side:
    """One version of the scripts, registered on Redis, with a namespace of its own."""

    def __init__(self, client: redis.Redis, name: str, version: Version, models: int) -> None:
        self.name = name
        self.client = client
        self.core = RouterCore(RouterSettings(namespace=f"bench-ab-{name}-{uuid.uuid4().hex[:6]}"))
        self.scripts = {op: client.register_script(src)
                        for op, (src, _) in version.sources.items()}
        self.version = version
        self.models = [f"m{k}" for k in range(models)]
        quota = ModelQuota(rpm=10**9, tpm=10**12, max_concurrency=10**6).to_redis()
        for m in self.models:
            self._run("set_quota", [m], m, quota)

    def _run(self, op: str, models: list[str], *args: Any) -> Any:
        keys = self.version.keys(self.core.keys.prefix, op, models)
        return self.scripts[op](keys=keys, args=[self.core.settings_arg, *args])

    def block(self, admissions: int, batch: int) -> float:
        """Admit and settle ``admissions`` calls, ``batch`` per script call; wall µs each."""
        start = time.perf_counter()
        done = 0
        while done < admissions:
            requests = [encode_request(AdmitRequest(100)) for _ in range(batch)]
            reply = self._run("admit", self.models, json.dumps(requests))
            lids = [x[2].decode() for x in reply]
            settle = [encode_completion(Completion(lid, 50, 50)) for lid in lids]
            used = list(dict.fromkeys(m for m in map(lease_model, lids) if m is not None))
            self._run("complete", used, json.dumps(settle))
            done += batch
        return (time.perf_counter() - start) / admissions * 1e6

    def drop(self) -> None:
        for key in self.client.scan_iter(self.core.keys.prefix + "*"):
            self.client.delete(key)


def _lua_usec(client: redis.Redis) -> float:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return float(stats.get("usec", 0))


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def compare(a: Side, b: Side, batch: int, admissions: int, blocks: int) -> dict[str, Any]:
    lua: dict[str, list[float]] = {a.name: [], b.name: []}
    wall: dict[str, list[float]] = {a.name: [], b.name: []}
    for k in range(blocks):
        for side in (a, b) if k % 2 == 0 else (b, a):
            before = _lua_usec(a.client)
            wall[side.name].append(side.block(admissions, batch))
            lua[side.name].append((_lua_usec(a.client) - before) / admissions)
    doc: dict[str, Any] = {"batch": batch, "blocks": blocks, "admissions_per_block": admissions}
    for what, series in (("lua_us", lua), ("wall_us", wall)):
        diffs = [y - x for x, y in zip(series[a.name], series[b.name], strict=True)]
        doc[what] = {
            "diff_quartiles": _quartiles(diffs),
            **{name: {"median": statistics.median(v), "min": min(v)} for name, v in series.items()},
        }
    return doc


def render(doc: dict[str, Any], a: str, b: str) -> str:
    lines = []
    for what, label in (("lua_us", "Redis Lua µs / admission"), ("wall_us", "wall µs / admission")):
        lo, mid, hi = doc[what]["diff_quartiles"]
        sa, sb = doc[what][a], doc[what][b]
        line = (f"batch {doc['batch']:>2}  {label:<24} {b} - {a}: {mid:+.1f} (quartiles "
                f"{lo:+.1f} to {hi:+.1f});  {a} {sa['median']:.1f} (min {sa['min']:.1f}), "
                f"{b} {sb['median']:.1f} (min {sb['min']:.1f})")
        if what == "wall_us":
            line += (f"; admissions/s at the median {1e6 / sa['median']:,.0f} -> "
                     f"{1e6 / sb['median']:,.0f}")
        lines.append(line)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.admission.ab", description=__doc__
                                     and __doc__.splitlines()[0])
    parser.add_argument("--base", required=True,
                        help="side A: a git revision (e.g. HEAD~3) or a directory holding "
                             "an airflow_llm_router package")
    parser.add_argument("--head", help="side B, likewise (default: the working tree)")
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--models", type=int, default=10, help="quotas per namespace (10)")
    parser.add_argument("--blocks", type=int, default=60, help="blocks per side (60)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    client = redis.Redis.from_url(args.url)
    a = Side(client, "A", sources_at(args.base), args.models)
    b = Side(client, "B", sources_at(args.head), args.models)
    print(f"A = {args.base}, B = {args.head or 'the working tree'}; {args.models} models, "
          f"{args.blocks} blocks per side", flush=True)
    results = []
    try:
        for batch, admissions in ((1, 300), (64, 64 * 20)):
            results.append(compare(a, b, batch, admissions, args.blocks))
            print(render(results[-1], "A", "B"), flush=True)
    finally:
        a.drop()
        b.drop()
        client.close()
    if args.json:
        args.json.write_text(json.dumps({"base": args.base, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(interruptible(main))  # Ctrl-C or SIGTERM: its services stopped
