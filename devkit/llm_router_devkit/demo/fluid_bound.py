"""The capacity bound (docs/benchmarks.md, "The yardstick"), for a given workload and profile.

For model m with window W, mean tokens per call t and mean latency L, the sustainable call
rate is ``R_m = min(rpm_m / W, tpm_m / (W * t), max_concurrency_m / L)`` (an unlimited
field drops out). With preference lists the bound is a fluid max-flow of prompts to allowed
models; with few distinct lists it is exact by Hall's theorem: all work is done by time T
iff, for every set S of prompt groups, ``n(S) <= T * sum(R_m for m allowed by some group of
S)``. So the fluid makespan bound is the largest ``n(S) / R(N(S))`` over the sets S.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from llm_router_devkit.simulator.profile import SimulatorProfile
from llm_router_devkit.simulator.workload import draw

__all__ = ["Bound", "ModelCapacity", "capacities", "makespan_bound"]

#: Most distinct preference lists :func:`makespan_bound` enumerates subsets of (2**n).
MAX_GROUPS = 16


@dataclass(frozen=True)
class ModelCapacity:
    """What one model can sustain; times in wall-clock seconds.

    :param window_s: the limit window W.
    :param mean_tokens: mean input + output tokens per call (t).
    :param mean_latency_s: mean latency of a call (L).
    """

    model: str
    window_s: float
    rpm: int | None
    tpm: int | None
    max_concurrency: int | None
    mean_tokens: float
    mean_latency_s: float

    def rates(self) -> dict[str, float]:
        """Calls per second each set limit allows: keys ``rpm``, ``tpm``, ``concurrency``."""
        out = {}
        if self.rpm is not None:
            out["rpm"] = self.rpm / self.window_s
        if self.tpm is not None and self.mean_tokens > 0:
            out["tpm"] = self.tpm / (self.window_s * self.mean_tokens)
        if self.max_concurrency is not None and self.mean_latency_s > 0:
            out["concurrency"] = self.max_concurrency / self.mean_latency_s
        return out

    @property
    def rate(self) -> float:
        """R_m in calls per second (``inf`` if nothing limits the model)."""
        return min(self.rates().values(), default=math.inf)

    @property
    def binds(self) -> str:
        """The limit that sets R_m (``none`` if unlimited)."""
        rates = self.rates()
        return min(rates, key=rates.__getitem__) if rates else "none"


def capacities(profile: SimulatorProfile, prompts: Sequence[str]) -> dict[str, ModelCapacity]:
    """Each model's capacity for these prompts, with t and L averaged over the simulator's
    deterministic draws of every prompt on that model (what it would cost there)."""
    scale = profile.slowdown / profile.time_scale
    out = {}
    for model in profile.models:
        tokens = latency = 0.0
        for prompt in prompts:
            d = draw(profile, model, prompt)
            tokens += d.total_tokens
            latency += d.latency_s
        n = max(len(prompts), 1)
        out[model.name] = ModelCapacity(
            model=model.name,
            window_s=profile.scaled_window_s,
            rpm=model.rpm,
            tpm=model.tpm,
            max_concurrency=model.max_concurrency,
            mean_tokens=tokens / n,
            mean_latency_s=latency / n * scale,
        )
    return out


@dataclass(frozen=True)
class Bound:
    """The fluid makespan bound and the groups whose allowed models set it.

    :param fluid_s: ``max n(S) / R(N(S))``, seconds.
    :param latency_s: one call's latency added to it (the shortest mean latency).
    :param binding: the groups of S (``None`` = any model) at the maximum.
    """

    fluid_s: float
    latency_s: float
    binding: tuple[tuple[str, ...] | None, ...]

    @property
    def makespan_s(self) -> float:
        return self.fluid_s + self.latency_s


def makespan_bound(
    groups: Mapping[tuple[str, ...] | None, int], capacity: Mapping[str, ModelCapacity]
) -> Bound:
    """The least time the quotas allow for ``groups`` (allowed models -> how many prompts).

    :raises ValueError: with more than :data:`MAX_GROUPS` distinct groups, or a group with
        no known model.
    """
    keys = [g for g, n in groups.items() if n > 0]
    if len(keys) > MAX_GROUPS:
        raise ValueError(f"{len(keys)} distinct model lists; at most {MAX_GROUPS} supported")
    everyone = tuple(capacity)

    def allowed(group: tuple[str, ...] | None) -> Iterable[str]:
        return everyone if group is None else [m for m in group if m in capacity]

    best = 0.0
    binding: tuple[tuple[str, ...] | None, ...] = ()
    for size in range(1, len(keys) + 1):
        for subset in combinations(keys, size):
            models = {m for g in subset for m in allowed(g)}
            rate = sum(capacity[m].rate for m in models)
            if rate <= 0:
                raise ValueError(f"prompts allowing {subset} can go to no known model")
            t = sum(groups[g] for g in subset) / rate
            if t > best:
                best, binding = t, subset
    latency = min((c.mean_latency_s for c in capacity.values()), default=0.0)
    return Bound(fluid_s=best, latency_s=latency if keys else 0.0, binding=binding)
