"""The demo's closing report: the run timed as the benchmarks' headline is, per-model
traffic as the backend counted it, then totals.

Everything about traffic comes from the simulator's ``/stats`` (the backend grades the
router, never the router itself); task outcomes come from the task store. Pure functions of
those documents, so the arithmetic is tested on hand-computed numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llm_router_devkit.demo.fluid_bound import Bound, ModelCapacity
from llm_router_devkit.product_path import (
    FROM_FIRST_CALL,
    FROM_FIRST_CLAIM,
    FROM_RUN_START,
    Timed,
    speed_share,
)

__all__ = ["Calls", "ModelRow", "Totals", "format_report", "model_rows"]


@dataclass(frozen=True)
class ModelRow:
    """One model's traffic over the run, per window of ``window_s`` wall-clock seconds.

    ``avg_*`` spread what the backend accepted over the makespan; ``peak_*`` are the busiest
    sliding windows of accepted and of offered (accepted + refused) traffic.
    """

    model: str
    calls: int
    rejected_429: int
    avg_requests: float
    peak_requests: int
    peak_offered_requests: int
    rpm: int | None
    avg_tokens: float
    peak_tokens: int
    peak_offered_tokens: int
    tpm: int | None
    peak_concurrency: int
    max_concurrency: int | None
    rate_per_window: float  # R_m x W: the calls per window the model can sustain
    binds: str

    @property
    def utilisation(self) -> float | None:
        """Accepted calls per window over R_m x W (None if nothing limits the model)."""
        if math.isinf(self.rate_per_window) or self.rate_per_window <= 0:
            return None
        return self.avg_requests / self.rate_per_window

    @property
    def within_limits(self) -> bool:
        """No 429 and no accepted window or instant above a limit (as the backend saw it)."""
        over = [
            self.rpm is not None and self.peak_requests > self.rpm,
            self.tpm is not None and self.peak_tokens > self.tpm,
            self.max_concurrency is not None and self.peak_concurrency > self.max_concurrency,
        ]
        return self.rejected_429 == 0 and not any(over)


def model_rows(
    stats: Mapping[str, Any], capacity: Mapping[str, ModelCapacity], makespan_s: float
) -> list[ModelRow]:
    """Rows from a simulator ``/stats`` document, in the capacity's model order.

    ``avg_requests`` and ``avg_tokens`` are per window: accepted / (makespan / window).
    """
    rows = []
    for name, cap in capacity.items():
        m = stats["models"].get(name)
        if m is None:
            continue
        limits = m.get("limits") or {}
        windows = makespan_s / cap.window_s if makespan_s > 0 else 0.0
        rows.append(
            ModelRow(
                model=name,
                calls=int(m["accepted"]),
                rejected_429=int(m["rejected_429"]),
                avg_requests=m["accepted"] / windows if windows else 0.0,
                peak_requests=int(m["peak_accepted_requests_in_window"]),
                peak_offered_requests=int(m["peak_offered_requests_in_window"]),
                rpm=limits.get("rpm"),
                avg_tokens=m["tokens_accepted"] / windows if windows else 0.0,
                peak_tokens=int(m["peak_accepted_tokens_in_window"]),
                peak_offered_tokens=int(m["peak_offered_tokens_in_window"]),
                tpm=limits.get("tpm"),
                peak_concurrency=int(m["peak_concurrency"]),
                max_concurrency=limits.get("max_concurrency"),
                rate_per_window=cap.rate * cap.window_s,
                binds=cap.binds,
            )
        )
    return rows


@dataclass(frozen=True)
class Calls:
    """What became of the calls the router admitted, summed over the models.

    ``admitted``, ``failed``, ``rate_limited`` and ``abandoned`` are the router's counters
    (``RouterClient.stats()``), ``backend_errors`` and ``backend_timeouts`` the backend's
    (``/stats``), ``hedged`` the drain's own count (its solvers' summaries; None: unknown).
    """

    admitted: int
    failed: int  # calls that ended in an error: a 5xx, a timeout, a connection lost
    rate_limited: int  # calls the backend answered 429
    abandoned: int  # admissions whose call was never sent: their prompt was answered first
    backend_errors: int  # 500s the backend answered
    backend_timeouts: int
    hedged: int | None = None  # prompts whose late call was sent to a second model too


def calls_from(router_counters: Mapping[str, Mapping[str, int]], backend: Mapping[str, Any],
               hedged: int | None) -> Calls:
    """:class:`Calls` from the router's counters per model, a simulator ``/stats`` document
    and the drain's count of hedged prompts."""
    def router(name: str) -> int:
        return sum(int(c.get(name, 0)) for c in router_counters.values())

    def sim(name: str) -> int:
        return sum(int(m.get(name, 0)) for m in backend["models"].values())

    return Calls(admitted=router("admitted"), failed=router("errors"),
                 rate_limited=router("rate_limited"), abandoned=router("abandoned"),
                 backend_errors=sim("errors"), backend_timeouts=sim("timeouts"),
                 hedged=hedged)


@dataclass(frozen=True)
class Totals:
    """Task outcomes and timings of one run (seconds, wall clock)."""

    tasks: int
    counts: Mapping[str, int]  # per store status
    #: from the DAG run's start, the first claim and the first call to the last answer
    #: written (:mod:`llm_router_devkit.product_path`)
    times: Timed
    bound: Bound  # the fluid approximation (mean costs): not a lower bound
    time_scale: float
    window_s: float
    yardstick: Yardstick | None = None
    calls: Calls | None = None

    @property
    def makespan_s(self) -> float:
        """From the first call at the backend to the last answer written."""
        return self.times.from_first_call_s

    @property
    def left(self) -> int:
        """Tasks neither solved nor dead-lettered."""
        return self.counts.get("pending", 0) + self.counts.get("claimed", 0)

    @property
    def throughput(self) -> float:
        return self.counts.get("solved", 0) / self.makespan_s if self.makespan_s > 0 else 0.0

    @property
    def of_bound(self) -> float:
        """Fluid approximation over achieved makespan (not a bound: a run may exceed 1.0;
        0 if the run did not finish)."""
        return self.speed_of(self.bound.makespan_s, self.makespan_s) or 0.0

    def speed_of(self, yardstick_s: float, made_s: float | None) -> float | None:
        """The run's speed, timed as ``made_s``, as a share of a schedule taking
        ``yardstick_s``; None if the run did not finish or that time was not recorded."""
        return None if made_s is None else speed_share(yardstick_s, made_s, not self.left)


@dataclass(frozen=True)
class Yardstick:
    """The workload's LP lower bound and clairvoyant reference makespan (seconds)."""

    lp_bound_s: float
    reference_s: float
    seconds: float  # time taken to compute them
    #: the reference with ordered preference lists kept (every send goes to the first model
    #: of the prompt's list with room; a prompt may wait for an earlier one); None: no lists
    kept_s: float | None = None
    #: the reference with costs unknown (choices on expected costs, charged the draws),
    #: with the preference lists kept where the backlog has them; None: not computed
    blind_s: float | None = None


def _n(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return f"{value:,.{digits}f}"


# (title, width) per column; groups of columns are separated by " |".
_COLUMNS: list[list[tuple[str, int]]] = [
    [("model", -15), ("calls", 6), ("429s", 5)],
    [("avg", 6), ("peak", 5), ("offer", 6), ("rpm", 5)],
    [("avg", 8), ("peak", 8), ("offer", 8), ("tpm", 8)],
    [("peak", 5), ("max", 5)],
    [("R_m", 6), ("binds", -12), ("util", 5)],
]
_GROUPS = ("", "requests/window", "tokens/window", "in flight", "capacity/window")


def _line(cells: list[list[str]]) -> str:
    parts = []
    for group, values in zip(_COLUMNS, cells, strict=True):
        parts.append("".join(
            (f" {v:<{-w - 1}}" if w < 0 else f"{v:>{w + 1}}") for (_, w), v in zip(
                group, values, strict=True)))
    return " |".join(parts)


def _header() -> list[str]:
    widths = [sum(abs(w) + 1 for _, w in group) for group in _COLUMNS]
    top = " |".join(f"{g:^{w}}" for g, w in zip(_GROUPS, widths, strict=True))
    return [top.rstrip(), _line([[t for t, _ in group] for group in _COLUMNS])]


def _row(r: ModelRow) -> str:
    util = r.utilisation
    return _line([
        [r.model, str(r.calls), str(r.rejected_429)],
        [_n(r.avg_requests, 1), _n(r.peak_requests), _n(r.peak_offered_requests), _n(r.rpm)],
        [_n(r.avg_tokens), _n(r.peak_tokens), _n(r.peak_offered_tokens), _n(r.tpm)],
        [_n(r.peak_concurrency), _n(r.max_concurrency)],
        [_n(r.rate_per_window, 1), r.binds, "-" if util is None else f"{util:.0%}"],
    ])


def _why_refused(rows: list[ModelRow]) -> list[str]:
    """Why a token window went over, where one did: the demo's prompts carry no output cap,
    so admission reserves a learned estimate of each answer, and an answer longer than
    that is counted in full by the backend when it arrives (the residual risk
    docs/engine.md states)."""
    over = [r.model for r in rows
            if r.rejected_429 and r.tpm is not None and r.peak_offered_tokens > r.tpm]
    if not over:
        return []
    return [f"  {', '.join(over)}: answers longer than their reservation took a token "
            "window over; these prompts carry no output cap, so admission reserves a "
            "learned estimate (p95 + the mean excess). With max_output_tokens on the "
            "models_backend connection it reserves the cap and tpm holds exactly "
            "(docs/engine.md, \"What is promised\")."]


def format_report(rows: list[ModelRow], totals: Totals, violations: int) -> str:
    """The closing report as plain text (no prompt text, ever)."""
    b = totals.bound
    window_provider_s = totals.window_s * totals.time_scale
    binding = ", ".join("any model" if g is None else "/".join(g) for g in b.binding)
    lines = [
        *_timing_lines(totals),
        "",
        f"Per model, as the backend counted it (window = {totals.window_s:g} s wall clock "
        f"= {window_provider_s:g} provider s; time scale {totals.time_scale:g}):",
        *_header(),
        "-" * len(_header()[1]),
        *(_row(r) for r in rows),
        "",
        f"tasks: {totals.tasks}  solved {totals.counts.get('solved', 0)}  "
        f"dead {totals.counts.get('dead', 0)}  left unsolved {totals.left}",
        f"violations at the backend (429s): {violations}",
        *_why_refused(rows),
        *_calls_lines(totals),
        f"throughput: {totals.throughput:.1f} tasks/s {FROM_FIRST_CALL}",
        *_yardstick_lines(totals),
        f"fluid approximation (mean costs; not a lower bound): {b.makespan_s:.1f} s = fluid "
        f"{b.fluid_s:.1f} s + one call {b.latency_s:.1f} s; set by the tasks allowing "
        f"[{binding}]; this run, {FROM_FIRST_CALL}, at {totals.of_bound:.0%} of it",
        "  R_m = min(rpm/W, tpm/(W*t), max_concurrency/L) per model (column R_m), W the",
        "  window, t and L the mean tokens and latency of these prompts on that model",
        "  (simulator draws); preference lists by Hall's condition (fluid max-flow).",
    ]
    return "\n".join(lines)


def _shares(totals: Totals, made_s: float | None) -> str:
    """`` = x% of the reference's speed, ...`` for a run timed as ``made_s``: against the
    reference, the LP bound and the preference-keeping reference where there is one."""
    y = totals.yardstick
    if y is None or made_s is None:
        return ""
    if totals.left:
        return " (the run did not finish: no share of a reference)"
    yardsticks = [(y.reference_s, "of the reference's speed"), (y.lp_bound_s, "of the LP bound's")]
    if y.kept_s is not None:
        yardsticks.append((y.kept_s, "of the preference-keeping reference's"))
    shares = [(totals.speed_of(s, made_s), words) for s, words in yardsticks]
    parts = [f"{share:.0%} {words}" for share, words in shares if share is not None]
    return " = " + ", ".join(parts) if parts else ""


def _timing_lines(totals: Totals) -> list[str]:
    """The headline: the run timed as the benchmarks time it, from the DAG run's start,
    from the first claim and (what it leaves out said) from the first call."""
    t = totals.times

    def took(made_s: float | None) -> str:
        return "not recorded" if made_s is None else f"{made_s:.1f} s{_shares(totals, made_s)}"

    before = t.before_first_call_s
    left_out = "" if before is None else f", {before:.1f} s here"
    return [
        "This run, timed as the benchmarks' headline is (docs/benchmarks.md, \"What is "
        "timed, from when\"), to the last answer written in the store:",
        f"  {FROM_RUN_START}: {took(t.from_run_start_s)}",
        f"  {FROM_FIRST_CLAIM}: {took(t.from_first_claim_s)}",
        f"  {FROM_FIRST_CALL} at the backend (the makespan): {took(t.from_first_call_s)}",
        f"    it leaves out the DAG run's start to the first call{left_out} (Airflow starting "
        "the run and its tasks, the first claim, the first admission), as the reference "
        "schedules start at their first send",
    ]


def _calls_lines(totals: Totals) -> list[str]:
    """Why the router admitted more calls than there are tasks: hedges and retries."""
    c = totals.calls
    if c is None:
        return []
    extra = c.admitted - totals.tasks
    more = (f"{extra} more than one per task: hedges and retries" if extra > 0
            else "one call per task at most")
    lines = [f"calls: the router admitted {c.admitted} for {totals.tasks} tasks ({more}):"]
    hedged = "?" if c.hedged is None else str(c.hedged)
    lines.append(
        f"  hedges: {hedged} prompts whose call ran past its model's late point, with no "
        "prompt waiting, were sent to a second model as well (the first answer is kept; "
        "both calls are paid)")
    timeouts = f", timed out {c.backend_timeouts}" if c.backend_timeouts else ""
    lines.append(
        f"  retries: {c.failed} calls failed (the backend answered 500 to "
        f"{c.backend_errors}{timeouts}) and {c.rate_limited} got a 429; a failed call is "
        "made again after a backoff (unless the other call of its hedged prompt answered: "
        "the two counts overlap), a task dead-lettered once its attempts are spent")
    if c.abandoned:
        lines.append(f"  abandoned: {c.abandoned} admissions whose call was never sent "
                     "(their prompt was answered first)")
    return lines


def _yardstick_lines(totals: Totals) -> list[str]:
    y = totals.yardstick
    if y is None:
        return ["LP lower bound and reference schedules: skipped (--no-yardstick)"]
    lines = [
        f"LP lower bound: {y.lp_bound_s:.1f} s (no schedule of these prompts can finish "
        "sooner: each prompt's own cost, windows counted step by step)",
        f"reference schedule: {y.reference_s:.1f} s (clairvoyant and achievable: the best "
        "makespan lies between the two)",
    ]
    if y.kept_s is not None:
        lines.append(
            f"reference with preferences kept: {y.kept_s:.1f} s (the same, but every send "
            "goes to the first model of the prompt's list with room; a prompt may wait for "
            "an earlier one)")
    if y.blind_s is not None:
        lines.append(
            f"reference with costs unknown: {y.blind_s:.1f} s (the same choices made on "
            "expected latencies and reserved tokens, charged the real draws: reachable "
            "without knowing them)")
        share = totals.speed_of(y.blind_s, totals.times.from_run_start_s)
        if share is not None:
            lines.append(f"  -> this run, {FROM_RUN_START}: {share:.0%} of its speed")
    lines.append(f"  (the bound and the references computed in {y.seconds:.1f} s; each starts "
                 "at its first send)")
    if totals.makespan_s and not totals.left and totals.makespan_s < y.lp_bound_s:
        lines.append(f"  BUG: this run, {FROM_FIRST_CALL}, beat the LP lower bound, so the "
                     "bound is wrong; please report it")
    return lines
