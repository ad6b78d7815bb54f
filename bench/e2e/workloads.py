"""The benchmark's workloads W1-W4, built from the demo's seeded backlog.

Every workload is a pure function of ``seed`` and the backend's model names, so both designs
meet exactly the same prompts (and, through the simulator's hashed draws, the same cost).
Times of events are in *windows* after the first call reaches the backend, so a workload
means the same thing at any time scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from llm_router_devkit.demo.seed import SeedTask, make_backlog

__all__ = ["WORKLOADS", "Arrival", "QuotaChange", "Workload", "build"]


@dataclass(frozen=True)
class Arrival:
    """Tasks enqueued ``at_windows`` windows after the first call at the backend."""

    at_windows: float
    tasks: tuple[SeedTask, ...]


@dataclass(frozen=True)
class QuotaChange:
    """Every set limit of the busiest model (largest R_m) multiplied by ``factor``, at the
    provider and in the router at the same instant, ``at_windows`` after the first call."""

    at_windows: float
    factor: float = 0.5


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    initial: tuple[SeedTask, ...]
    arrivals: tuple[Arrival, ...] = ()
    quota_change: QuotaChange | None = None

    @property
    def tasks(self) -> tuple[SeedTask, ...]:
        """Every task, the initial backlog first, then arrivals in order."""
        return self.initial + tuple(t for a in self.arrivals for t in a.tasks)

    @property
    def size(self) -> int:
        return len(self.initial) + sum(len(a.tasks) for a in self.arrivals)


def _any_model(tasks: Sequence[SeedTask], priority: str = "bulk") -> tuple[SeedTask, ...]:
    return tuple(replace(t, allowed_models=None, priority=priority) for t in tasks)


def w1(seed: int, models: Sequence[str]) -> Workload:
    return Workload("W1", "2,000 prompts, any model allowed",
                    _any_model(make_backlog(2000, seed=seed, models=models)))


def w2(seed: int, models: Sequence[str]) -> Workload:
    """W1's prompts with the demo's ordered preference lists (about a third of the tasks:
    code, reasoning, long documents, careful replies), each overflowing to a roomier model."""
    tasks = tuple(replace(t, priority="bulk")
                  for t in make_backlog(2000, seed=seed, models=models))
    return Workload("W2", "2,000 prompts, ordered model preferences (overflow)", tasks)


def w3(seed: int, models: Sequence[str]) -> Workload:
    """4,000 any-model prompts (so that at least two windows run after the change, whatever
    the design's speed) and the busiest model's limits halved one window in."""
    return Workload("W3", "4,000 prompts, any model; busiest model's quota halved after "
                    "1 window", _any_model(make_backlog(4000, seed=seed, models=models)),
                    quota_change=QuotaChange(at_windows=1.0))


#: W4's hot prompts: bursts of ``_HOT_BURST`` every ``_HOT_EVERY`` windows from ``_HOT_FROM``.
_HOT_BURSTS, _HOT_BURST, _HOT_FROM, _HOT_EVERY = 20, 5, 0.25, 0.15


def w4(seed: int, models: Sequence[str]) -> Workload:
    """A bulk backlog of 5,000 (about 3.4 windows at the bound's speed, so the backlog is
    still draining when the last hot prompt arrives) and 100 hot prompts arriving in bursts
    of 5 from 0.25 to 3.1 windows in."""
    bulk = _any_model(make_backlog(5000, seed=seed, models=models))
    hot = [replace(t, prompt=t.prompt.replace("[task ", "[hot ", 1))
           for t in _any_model(make_backlog(_HOT_BURSTS * _HOT_BURST, seed=seed + 1,
                                            models=models), priority="hot")]
    arrivals = tuple(
        Arrival(_HOT_FROM + i * _HOT_EVERY, tuple(hot[i * _HOT_BURST:(i + 1) * _HOT_BURST]))
        for i in range(_HOT_BURSTS))
    return Workload("W4", "5,000 bulk prompts, 100 hot ones arriving in bursts of 5 "
                    "during the drain", bulk, arrivals=arrivals)


WORKLOADS = {"W1": w1, "W2": w2, "W3": w3, "W4": w4}


def build(name: str, seed: int, models: Sequence[str]) -> Workload:
    """The workload called ``name`` (W1..W4) for this seed and these backend models."""
    return WORKLOADS[name](seed, models)
