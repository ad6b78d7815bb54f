"""The exact-window LP lower bound on a workload's makespan.

For a makespan T, let ``x[i,m,k] >= 0`` be the share of prompt i sent to model m during the
k-th window interval ``[kW, (k+1)W)`` (a relaxation of the real choice, which is one model
and one moment), with ``sum_{m,k} x[i,m,k] = 1``. Every schedule that ends by T gives such
an x satisfying the constraints below, so if the LP has no solution, no schedule ends by T:
the largest such T (found by bisection) is a lower bound.

Why each constraint holds for any schedule ending by T (a call of i on m takes ``L[i,m]``
and is charged ``c[i,m]`` tokens; ``a[i]`` is when i may first be sent):

- **Deadlines and arrivals.** A call sent in interval k is sent at or after
  ``max(kW, a[i])`` and ends by T: ``x[i,m,k] = 0`` unless ``max(kW, a[i]) + L[i,m] <= T``
  and ``a[i] < (k+1)W``.
- **Sliding windows, step by step.** A limit of r calls per window W means no window
  ``(t-W, t]`` holds more than r sends. The half-open interval ``[kW, (k+1)W)`` lies in
  such a window (take t just below (k+1)W, past its last send), so it holds at most r
  sends: ``sum_i x[i,m,k] <= r``. Tokens likewise, each call weighing its own ``c[i,m]``.
  So a full window's worth may go at once (the first-window burst), but not more.
- **A limit change inside an interval.** When model m's limit goes from r to r' at c, with
  ``kW < c < (k+1)W``, the interval is split: its sends before c (b of them) and from c
  on (a). The ones before c lie in one window under r: ``b <= r``. A send at s >= c is
  accepted only if the window ``(s-W, s]`` holds at most r' sends; for the last send of
  the interval that window holds every send of the interval from kW on, so if ``a > 0``
  then ``b + a <= r'``. For a cut (r' < r) the two cases together give
  ``b/r + a/r' <= 1`` (true of both: of ``a = 0, b <= r``, and of ``b + a <= r'`` as
  ``1/r <= 1/r'``); for a raise, ``b <= r`` and ``b + a <= r'``. An interval that starts
  at or after c is held to r'. Tokens likewise.
- **Concurrency.** Calls on m sent at or after kW run inside ``[kW, T]`` on at most C
  slots: ``sum_{i, k' >= k} x[i,m,k'] L[i,m] <= C (T - kW)`` for every k.

Also ``T >= a[i] + min_m L[i,m]`` for every prompt. The LPs are sparse (the concurrency sums
are chains of running totals) and solved by HiGHS (``scipy.optimize.linprog``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from llm_router_devkit.yardstick.instance import Instance

__all__ = ["LPBound", "lp_bound"]

@dataclass(frozen=True)
class LPBound:
    """The bound and how it was found.

    :param makespan_s: no schedule finishes the workload sooner (seconds from time 0).
    :param trivial_s: the largest ``a[i] + min_m L[i,m]`` (the bound without the limits).
    :param feasible_s: the smallest T at which the relaxation was feasible (the bisection's
        upper end; the true bound lies in ``[makespan_s, feasible_s]``).
    :param solves: LPs solved; ``seconds``: time taken.
    :param plan: the relaxation's shares at ``feasible_s``: ``plan[i] = {model: share}``
        (a good hint of where each prompt should go; the reference schedule tries it).
    """

    makespan_s: float
    trivial_s: float
    feasible_s: float
    solves: int
    seconds: float
    plan: tuple[dict[str, float], ...] = ()


def lp_bound(instance: Instance, *, rel_tol: float = 0.002) -> LPBound:
    """Bisect on T for the largest makespan the LP proves impossible.

    :param rel_tol: stop when the bracket is narrower than this fraction of T.
    """
    started = time.monotonic()
    trivial = max(instance.arrival(i) + min(lat for _, lat in options.values())
                  for i, options in enumerate(instance.cost))
    solves = 1
    plan = _solve(instance, trivial)
    if plan is not None:
        return LPBound(trivial, trivial, trivial, solves, time.monotonic() - started, plan)
    lo, hi = trivial, max(2 * trivial, trivial + _window(instance))
    while (plan := _solve(instance, hi)) is None:
        solves += 1
        lo, hi = hi, 2 * hi
    solves += 1
    while hi - lo > rel_tol * hi:
        mid = (lo + hi) / 2
        solves += 1
        found = _solve(instance, mid)
        if found is None:
            lo = mid
        else:
            hi = mid
            plan = found or plan  # an undecided T keeps the last plan
    # the plan the reference schedule follows: a vertex of the relaxation (simplex) names
    # fewer models per prompt than interior point's centre, and schedules better from it
    vertex = _solve(instance, hi, methods=("highs-ds",), limit_s=PLAN_LIMIT_S)
    return LPBound(lo, trivial, hi, solves + 1, time.monotonic() - started, vertex or plan)


def _window(instance: Instance) -> float:
    return max(lim.window_s for lim in instance.limits.values())


def _limit(instance: Instance, model: str, field: str, t: float) -> float:
    """``field`` of ``model``'s limits in force at ``t`` (inf if unlimited)."""
    value = getattr(instance.limits_at(model, t), field)
    return math.inf if value is None else float(value)


def _split_at(instance: Instance, model: str, k: int) -> float | None:
    """The change time if it falls strictly inside ``model``'s interval k, else None."""
    c = instance.change_at_s
    if c is None or model not in instance.limits_after:
        return None
    w = instance.limits[model].window_s
    return c if k * w < c < (k + 1) * w else None


def _slots(instance: Instance, model: str) -> int | None:
    """The most calls ``model`` may have in flight at any time (None: unlimited)."""
    values = [instance.limits[model].max_concurrency]
    if model in instance.limits_after:
        values.append(instance.limits_after[model].max_concurrency)
    return None if any(v is None for v in values) else max(v for v in values if v is not None)


@dataclass
class _Vars:
    """The LP's columns: one per (prompt, model, window interval) that can end by T; the
    interval that holds a limit change has two per prompt: sent before the change
    (``part`` 1) and from it on (``part`` 2); others have ``part`` 0."""

    prompt: list[int]
    model: list[str]
    window: list[int]
    tokens: list[int]
    latency: list[float]
    part: list[int]

    def add(self, i: int, m: str, k: int, tokens: int, lat: float, part: int) -> None:
        self.prompt.append(i)
        self.model.append(m)
        self.window.append(k)
        self.tokens.append(tokens)
        self.latency.append(lat)
        self.part.append(part)

    @classmethod
    def of(cls, instance: Instance, T: float) -> _Vars | None:
        v = cls([], [], [], [], [], [])
        for i, options in enumerate(instance.cost):
            a = instance.arrival(i)
            before = len(v.prompt)
            for m, (c, lat) in options.items():
                w = instance.limits[m].window_s
                k = int(a // w)
                while max(k * w, a) + lat <= T:
                    cut = _split_at(instance, m, k)
                    if cut is None:
                        v.add(i, m, k, c, lat, 0)
                    else:
                        if a < cut:
                            v.add(i, m, k, c, lat, 1)
                        if max(cut, a) + lat <= T:
                            v.add(i, m, k, c, lat, 2)
                    k += 1
            if len(v.prompt) == before:
                return None
        return v


class _Matrix:
    """A sparse matrix built row by row, with its right-hand sides."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.rhs: list[float] = []

    def add(self, cols: list[int], vals: list[float], rhs: float) -> None:
        self.rows.extend([len(self.rhs)] * len(cols))
        self.cols.extend(cols)
        self.vals.extend(vals)
        self.rhs.append(rhs)

    def sparse(self, width: int) -> Any:
        return coo_matrix((self.vals, (self.rows, self.cols)),
                          shape=(len(self.rhs), width)).tocsr()


def _concurrency_chains(instance: Instance, v: _Vars, T: float, eq: _Matrix,
                        bounds: list[tuple[float, float | None]],
                        groups: dict[tuple[str, int], list[int]]) -> None:
    """Per model, running totals ``A_k = A_{k+1} + sum(latency of sends in interval k)``
    capped at ``C (T - kW)``: the concurrency constraints, one short row each."""
    for m in instance.models:
        slots = _slots(instance, m)
        windows = [k for (mm, k) in groups if mm == m]
        if slots is None or not windows:
            continue
        w, top, first = instance.limits[m].window_s, max(windows), len(bounds)
        bounds.extend((0.0, slots * max(T - k * w, 0.0)) for k in range(top + 1))
        for k in range(top + 1):
            members = groups.get((m, k), [])
            cols = [*members, first + k, *([first + k + 1] if k < top else [])]
            vals = [*(v.latency[c] for c in members), -1.0, *([1.0] if k < top else [])]
            eq.add(cols, vals, 0.0)


def _weigher(v: _Vars, field: str) -> Callable[[int], float]:
    """What one column weighs against ``field``: its tokens for tpm, one call for rpm."""
    if field == "tpm":
        return lambda col: float(v.tokens[col])
    return lambda col: 1.0


def _window_rows(instance: Instance, v: _Vars, ub: _Matrix,
                 groups: dict[tuple[str, int], list[int]]) -> None:
    """At most a window's limit of sends (and of tokens) in each interval, per model; the
    interval of a change as the module's docstring says."""
    w_of = {m: instance.limits[m].window_s for m in instance.models}
    for (m, k), members in groups.items():
        cut = _split_at(instance, m, k)
        for field in ("rpm", "tpm"):
            weight = _weigher(v, field)
            if cut is None:
                cap = _limit(instance, m, field, k * w_of[m])
                if not math.isinf(cap):
                    ub.add(members, [weight(c) for c in members], cap)
                continue
            old, new = _limit(instance, m, field, k * w_of[m]), _limit(instance, m, field, cut)
            early = [c for c in members if v.part[c] == 1]
            if early and not math.isinf(old):
                ub.add(early, [weight(c) for c in early], old)
            if math.isinf(new):
                continue
            if new < old:  # b/r + a/r' <= 1 (1/inf = 0)
                ub.add(members, [weight(c) / (old if v.part[c] == 1 else new)
                                 for c in members], 1.0)
            else:  # b + a <= r'
                ub.add(members, [weight(c) for c in members], new)


#: HiGHS's algorithms in the order they are tried, and how long each may take on one LP.
METHODS = ("highs-ipm", "highs-ds", "highs")
SOLVE_LIMIT_S = 120.0
#: How long the simplex may take for the plan at the bound (else interior point's plan).
PLAN_LIMIT_S = 60.0

#: No solver reached a verdict at this T: not a proof of infeasibility, so the bisection
#: treats T as feasible (the bound stays valid, if less tight), without a plan.
UNKNOWN: tuple[dict[str, float], ...] = ()


def _solve(instance: Instance, T: float, methods: tuple[str, ...] = METHODS,
           limit_s: float = SOLVE_LIMIT_S) -> tuple[dict[str, float], ...] | None:
    """The relaxation's shares per prompt and model if it is feasible at makespan T;
    :data:`UNKNOWN` if no solver could tell (of ``methods``, each given ``limit_s``);
    None if it is proven infeasible."""
    v = _Vars.of(instance, T)
    if v is None:
        return None
    n = len(v.prompt)
    bounds: list[tuple[float, float | None]] = [(0.0, None)] * n
    eq, ub = _Matrix(), _Matrix()
    by_prompt: dict[int, list[int]] = {}
    groups: dict[tuple[str, int], list[int]] = {}
    for col, i in enumerate(v.prompt):
        by_prompt.setdefault(i, []).append(col)
        groups.setdefault((v.model[col], v.window[col]), []).append(col)
    for members in by_prompt.values():  # each prompt sent in full
        eq.add(members, [1.0] * len(members), 1.0)
    _concurrency_chains(instance, v, T, eq, bounds, groups)
    _window_rows(instance, v, ub, groups)
    width = len(bounds)
    args = {"A_ub": ub.sparse(width) if ub.rhs else None,
            "b_ub": np.array(ub.rhs) if ub.rhs else None, "A_eq": eq.sparse(width),
            "b_eq": np.array(eq.rhs), "bounds": bounds}
    # Interior point first: on these feasibility LPs (no objective) it is the steadiest
    # (HiGHS's simplex took minutes on some W3 instances, or ended without a verdict); each
    # algorithm gets SOLVE_LIMIT_S, then the next is tried. Only a proof of infeasibility
    # raises the bound.
    for method in methods:
        result = linprog(np.zeros(width), method=method, options={"time_limit": limit_s},
                         **args)
        if result.status in (0, 2):
            break
    if result.status == 2:  # infeasible
        return None
    if result.status != 0:
        return UNKNOWN
    plan: list[dict[str, float]] = [{} for _ in instance.cost]
    for col in map(int, np.flatnonzero(result.x[:n] > 1e-6)):
        shares = plan[v.prompt[col]]
        shares[v.model[col]] = shares.get(v.model[col], 0.0) + float(result.x[col])
    return tuple(plan)
