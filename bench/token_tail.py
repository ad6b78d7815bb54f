"""How often a full token window is overrun by long answers: a model of one model's window.

The provider counts a call's real tokens from its send; the engine reserves an estimate
for an output it cannot know (the 95th percentile of the last 64 answers plus their mean
excess) and keeps a head free in the token window (``lib/capacity.lua``). A call is
refused (429) when, at its arrival, the provider's window cannot take its real tokens: its
own answer ran long, or answers still in flight did. Whether the head is large enough is a
question of the output's tail, which a few benchmark runs cannot answer (the real runs
had about one coder 429 in ten): this replays thousands of drains of one model kept at its
token limit, in simulated time, and counts them.

The model: one model with the simulator's draws (``--model``, the default profile's
coder: 40,000 tpm, 90 rpm, 16 in flight, 800 output tokens a call, lognormal 0.6; the
latency's link to the output included), a backlog that never empties, admission as the
engine decides it for requests whose output it estimates (the percentile floored at the
quota's prior, ``expected_output_tokens``, until 16 answers; the mean excess; the window
kept a guard longer than the provider's), and a head by ``--rule``:

- ``overrun``: the largest overrun of one call lately, halving every ``--halve-s``;
- ``tail`` (the engine's): the larger of that and the output tail (the lognormal fit of
  the last 64 answers at ``--tail-z`` deviations, at least ``--early`` times the
  estimate before 64), less the request's reservation.

It is a model of the rule, not the engine: the engine's own tests hold the rule
(``tests/integration/engine/test_kinds.py``) and ``python -m bench.direct`` measures the
drains. Reported: 429s, the drains that had one, and the calls a drain sent (what the
head costs when the tokens bind). On demand, not in CI; the same seed gives the same
figures.

    python -m bench.token_tail --drains 2000 --rule overrun
    python -m bench.token_tail --drains 2000 --rule tail --tail-z 3.0
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import sys
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from llm_router_devkit.simulator.profile import ModelProfile, SimulatorProfile
from llm_router_devkit.simulator.workload import draw_latency, draw_output_tokens

OBSERVED = 64  # lib/kinds.lua: the answers a percentile and the tail are taken of
OUTPUT_TRUST = 16  # lib/kinds.lua: the prior floors the percentile until this many
EXCESS_ALPHA = 0.05  # lib/kinds.lua: the mean excess's EWMA


@dataclass
class Learned:
    """What the engine knows of the model's outputs, as it learns it."""

    prior: int
    halve_s: float
    seen: deque[int] = field(default_factory=lambda: deque(maxlen=OBSERVED))
    estimate: int = 0
    excess: float = 0.0
    top: float = 0.0
    top_at: float = 0.0
    #: the mean and the deviation of the logs of ``seen`` (the deviation once 2 were seen)
    log_mean: float = 0.0
    log_sd: float | None = None

    def __post_init__(self) -> None:
        self.estimate = self.prior

    def top_now(self, t: float) -> float:
        return float(self.top * 0.5 ** (max(0.0, t - self.top_at) / self.halve_s))

    def settle(self, t: float, output: int, overrun: int) -> None:
        self.excess += EXCESS_ALPHA * (overrun - self.excess)
        if overrun > self.top_now(t):
            self.top, self.top_at = overrun, t
        self.seen.append(output)
        ranked = sorted(self.seen)
        p95 = ranked[max(0, math.ceil(len(ranked) * 0.95) - 1)]
        self.estimate = max(p95, self.prior) if len(ranked) < OUTPUT_TRUST else p95
        if len(ranked) >= 2:
            logs = [math.log(max(1, x)) for x in ranked]
            self.log_mean, self.log_sd = statistics.fmean(logs), statistics.stdev(logs)


Head = Callable[[Learned, float, int], float]


def overrun_head(learned: Learned, t: float, reserved_output: int) -> float:
    return math.ceil(learned.top_now(t))


def tail_head(z: float, early: float) -> Head:
    def head(learned: Learned, t: float, reserved_output: int) -> float:
        tail = early * learned.estimate
        if learned.log_sd is not None:
            fit = math.exp(learned.log_mean + z * learned.log_sd)
            tail = fit if len(learned.seen) >= OBSERVED else max(tail, fit)
        return math.ceil(max(learned.top_now(t), tail - reserved_output))
    return head


def drain(model: ModelProfile, window_s: float, guard_s: float, horizon_s: float,
          head: Head, learned: Learned, rng: random.Random) -> tuple[list[float], int]:
    """One drain of ``horizon_s`` (simulated) seconds: the times of its 429s, its calls."""
    assert model.tpm and model.rpm
    conc = model.max_concurrency or 10**9
    ours: deque[tuple[float, int]] = deque()  # admissions: (time, call)
    counted: dict[int, int] = {}  # call -> tokens in the engine's window
    theirs: deque[tuple[float, int]] = deque()  # the provider's window: (time, tokens)
    theirs_sum = 0
    live: dict[int, tuple[int, int, int]] = {}  # call -> (reserved, input, output)
    ends: list[tuple[float, int]] = []
    refused: list[float] = []
    t, calls = 0.0, 0
    while t < horizon_s:
        while ours and ours[0][0] <= t - window_s - guard_s:
            counted.pop(ours.popleft()[1])
        while theirs and theirs[0][0] <= t - window_s:
            theirs_sum -= theirs.popleft()[1]
        while len(live) < conc and len(ours) < model.rpm:
            used = sum(counted.values())
            key = rng.randbytes(32)
            output = draw_output_tokens(model, key)
            inp = rng.randint(100, 300)
            reserved = learned.estimate + math.ceil(learned.excess)
            room = head(learned, t, reserved) if used else 0
            if used and used + inp + reserved + room > model.tpm:
                break
            calls += 1
            ours.append((t, calls))
            if theirs_sum + inp + output > model.tpm:
                refused.append(t)  # counted by the engine until its window moves on
                counted[calls] = inp + output
                continue
            counted[calls] = inp + reserved
            theirs.append((t, inp + output))
            theirs_sum += inp + output
            live[calls] = (reserved, inp, output)
            heapq.heappush(ends, (t + draw_latency(model, key, output), calls))
        times = [ends[0][0]] if ends else []
        if ours:
            times.append(ours[0][0] + window_s + guard_s + 1e-9)
        if theirs:
            times.append(theirs[0][0] + window_s + 1e-9)
        t = min(times)
        while ends and ends[0][0] <= t:
            _, call = heapq.heappop(ends)
            reserved, inp, output = live.pop(call)
            if call in counted:  # still in the engine's window: the real tokens count
                counted[call] = inp + output
            learned.settle(t, output, max(0, output - reserved))
    return refused, calls - len(refused)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.token_tail",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", default="coder", help="a model of the default profile")
    parser.add_argument("--rule", choices=("overrun", "tail"), default="tail")
    parser.add_argument("--tail-z", type=float, default=3.0, help="the tail's deviations")
    parser.add_argument("--early", type=float, default=3.0,
                        help="the tail's floor, times the estimate, before 64 answers")
    parser.add_argument("--drains", type=int, default=1000)
    parser.add_argument("--windows", type=int, default=4, help="each drain's length")
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--guard-s", type=float, default=0.15,
                        help="how much longer the engine counts an admission")
    parser.add_argument("--halve-s", type=float, default=180.0,
                        help="the largest overrun's half-life (a minute at time scale 3)")
    parser.add_argument("--seed", type=int, default=1)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    models = {m.name: m for m in SimulatorProfile.default().models}
    model = models.get(args.model)
    if model is None:
        parser.exit(2, f"error: --model {args.model}: give one of {', '.join(models)}\n")
    if not model.tpm or not model.rpm:
        parser.exit(2, f"error: --model {args.model}: its profile has no rpm or tpm limit\n")
    for name in ("drains", "windows"):
        if getattr(args, name) < 1:
            parser.exit(2, f"error: --{name} {getattr(args, name)}: give at least 1\n")
    head = overrun_head if args.rule == "overrun" else tail_head(args.tail_z, args.early)
    prior = min(2 * model.output_tokens_mean, model.output_tokens_max)  # the demo's quotas
    rng = random.Random(args.seed)
    refused: list[float] = []
    with_one = sent = 0
    for _ in range(args.drains):
        times, calls = drain(model, args.window_s, args.guard_s,
                             args.windows * args.window_s, head,
                             Learned(prior=prior, halve_s=args.halve_s), rng)
        refused += times
        with_one += bool(times)
        sent += calls
    by_window = Counter(int(t // args.window_s) + 1 for t in refused)
    print(f"{args.model}, rule {args.rule}"
          + (f" (z {args.tail_z}, early {args.early}x)" if args.rule == "tail" else "")
          + f": {len(refused)} 429s in {args.drains} drains, {with_one} drains with one "
          f"({100 * with_one / args.drains:.2f} %), {sent / args.drains:.1f} calls a drain; "
          "429s by window: " + ", ".join(f"{w}: {by_window[w]}" for w in
                                          range(1, args.windows + 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
