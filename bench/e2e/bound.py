"""The capacity lower bound on makespan, for workloads whose capacity changes mid-run or
whose tasks arrive over time.

It extends ``llm_router_devkit.demo.fluid_bound`` (docs/benchmarks.md): each model m
sustains ``R_m = min(rpm/W, tpm/(W*t), max_concurrency/L)`` calls per second, t and L the
mean tokens and latency of the workload's prompts on m (the simulator's own draws). All work
can be done by T, in the fluid limit, iff for every set S of task groups (tasks with the same
list of allowed models), the tasks of S fit in the capacity their allowed models offer up to
T: ``n(S) <= integral_0^T R_S(t) dt`` (max-flow / Hall over time). With a capacity change at
``t_c`` (R before, R' after), that integral is ``R_S * T`` up to t_c and
``R_S * t_c + R'_S * (T - t_c)`` after. With arrivals and one group (any model), the fluid
machine is work-conserving, so T = max over arrival times a of ``a + (tasks arriving at or
after a) / R``. One call's latency (the shortest mean) is added, as in the demo. Time 0 is
the first call at the backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations

from llm_router_devkit.demo.fluid_bound import MAX_GROUPS, ModelCapacity

__all__ = ["PhasedBound", "halved", "phased_bound", "release_bound"]

Group = tuple[str, ...] | None


@dataclass(frozen=True)
class PhasedBound:
    fluid_s: float
    latency_s: float
    binding: tuple[Group, ...]

    @property
    def makespan_s(self) -> float:
        return self.fluid_s + self.latency_s


def _allowed(group: Group, capacity: Mapping[str, ModelCapacity]) -> Iterable[str]:
    return tuple(capacity) if group is None else [m for m in group if m in capacity]


def _time_to_serve(n: float, rate: float, rate_after: float, t_change: float | None) -> float:
    """Least T with ``n <= integral_0^T rate(t) dt`` for a rate that changes at t_change."""
    if t_change is None or n <= rate * t_change:
        return n / rate
    if rate_after <= 0:
        raise ValueError("no capacity left after the change")
    return t_change + (n - rate * t_change) / rate_after


def phased_bound(groups: Mapping[Group, int], before: Mapping[str, ModelCapacity],
                 after: Mapping[str, ModelCapacity] | None = None,
                 t_change: float | None = None) -> PhasedBound:
    """The fluid makespan bound of ``groups`` (allowed models -> tasks) with the capacity
    ``before`` until ``t_change`` seconds and ``after`` from then on (no change if None).

    :raises ValueError: with more than ``MAX_GROUPS`` distinct groups, or a group no known
        model serves.
    """
    after = after or before
    keys = [g for g, n in groups.items() if n > 0]
    if len(keys) > MAX_GROUPS:
        raise ValueError(f"{len(keys)} distinct model lists; at most {MAX_GROUPS} supported")
    best = 0.0
    binding: tuple[Group, ...] = ()
    for size in range(1, len(keys) + 1):
        for subset in combinations(keys, size):
            models = sorted({m for g in subset for m in _allowed(g, before)})  # stable sums
            rate = sum(before[m].rate for m in models)
            if rate <= 0:
                raise ValueError(f"prompts allowing {subset} can go to no known model")
            rate_after = sum(after[m].rate for m in models)
            t = _time_to_serve(sum(groups[g] for g in subset), rate, rate_after, t_change)
            if t > best:
                best, binding = t, subset
    latency = min((c.mean_latency_s for c in before.values()), default=0.0)
    return PhasedBound(best, latency if keys else 0.0, binding)


def release_bound(releases: Sequence[tuple[float, int]],
                  capacity: Mapping[str, ModelCapacity]) -> PhasedBound:
    """The fluid bound for any-model tasks released over time: ``releases`` are
    (seconds after the first call, tasks), the initial backlog at 0."""
    rate = sum(c.rate for c in capacity.values())
    ordered = sorted(releases)
    best = 0.0
    for i, (at, _) in enumerate(ordered):
        best = max(best, at + sum(n for _, n in ordered[i:]) / rate)
    latency = min((c.mean_latency_s for c in capacity.values()), default=0.0)
    return PhasedBound(best, latency, (None,))


def halved(capacity: ModelCapacity, factor: float) -> ModelCapacity:
    """The model's capacity with every set limit multiplied by ``factor`` (rounded down,
    at least 1), as the benchmark's quota change does."""

    def scale(value: int | None) -> int | None:
        return None if value is None else max(1, int(value * factor))

    return replace(capacity, rpm=scale(capacity.rpm), tpm=scale(capacity.tpm),
                   max_concurrency=scale(capacity.max_concurrency))
