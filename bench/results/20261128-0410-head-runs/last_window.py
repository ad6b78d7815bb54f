"""W1's last window as a router that does not know the draws would fill it (run from the
checkout's root with .venv/bin/python; seed 1, time scale 3, 20 s windows).

The reference sends its second window at 20.0 s: 533 calls on flash-mini, 51 on flash and
33 on chat-small, each a prompt it knows to be short there. A router that does not know
the draws fills such slots with prompts that are, for it, any of the backlog's. Drawn at
random (3,000 times) from W1's 2,000 prompts, with their own latencies:
- the whole last window of the reference (its 617 slots at its send times);
- flash-mini's 533 slots alone, all sent at 20.0 s (perfect timing);
- the same with each flash-mini call still running L s after its send sent again on flash
  (or on chat-small) at 20 + L, its first answer kept, that model assumed free: hedging
  at its best.
"""
import random
import statistics

from bench.e2e.workloads import build
from bench.e2e.yardstick import instance_of
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.yardstick import lp_bound, reference_schedule

W = 20.0
p = SimulatorProfile.default(time_scale=3.0, seed=1)
inst = instance_of(build("W1", 1, [m.name for m in p.models]), p)
ref = reference_schedule(inst, lp_bound(inst).plan)
slots = [(m, s) for m, s in ref.sends if s >= W]
pool = list(range(inst.size))
lat = {m: [inst.cost[j][m][1] for j in pool] for m in ("flash-mini", "flash", "chat-small")}
print(f"reference {ref.makespan_s:.2f} s; its last window: {len(slots)} calls")


def report(name: str, spans: list[float]) -> None:
    spans.sort()
    med = spans[len(spans) // 2]
    print(f"{name}: median {med:.2f} s (p10 {spans[len(spans) // 10]:.2f}, "
          f"p90 {spans[9 * len(spans) // 10]:.2f}); reference / median "
          f"{ref.makespan_s / med * 100:.1f} %")


rng = random.Random(3)


def last_end(picked: list[int]) -> float:
    return max(s + inst.cost[j][m][1] for (m, s), j in zip(slots, picked, strict=True))


report("reference's last-window slots, random prompts",
       [last_end(rng.sample(pool, len(slots))) for _ in range(3000)])
n = sum(1 for m, _ in slots if m == "flash-mini")
report(f"{n} flash-mini calls at 20.0 s, random prompts",
       [W + max(lat["flash-mini"][j] for j in rng.sample(pool, n)) for _ in range(3000)])
for other in ("flash", "chat-small"):
    for late in (0.8, 1.0, 1.3):
        spans, hedges = [], []
        for _ in range(3000):
            pick = rng.sample(pool, n)
            ends = [min(lat["flash-mini"][j], late + lat[other][j])
                    if lat["flash-mini"][j] > late else lat["flash-mini"][j] for j in pick]
            hedges.append(sum(1 for j in pick if lat["flash-mini"][j] > late))
            spans.append(W + max(ends))
        report(f"  hedged on {other} at {late} s ({statistics.fmean(hedges):.0f} hedges)", spans)
