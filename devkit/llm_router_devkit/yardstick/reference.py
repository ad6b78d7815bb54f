"""The clairvoyant reference schedule: achievable, so the best makespan is at most its own.

An event simulation in time order. It knows every prompt's cost on every model and obeys
the limits exactly as a strict backend counts them: at most ``rpm`` sends and ``tpm``
tokens in any window ``(t-W, t]``, at most ``max_concurrency`` calls in flight, and the
limits in force at each send. At each moment it takes the waiting prompts in a given order
and sends each to the model that finishes it earliest (now, or later on a faster model if
waiting for it finishes sooner: then the prompt waits). It tries a few orders and keeps the
best, then searches locally from it (:func:`_improved`). Sends only ever happen at the
current time, so a send never invalidates an earlier one: every schedule it returns passes
:func:`check_schedule`, which it checks (:func:`checked`: a breach raises).

With ``ordered=True`` it keeps each prompt's ordered preference list
(``Instance.preference``) at every send: a prompt goes to a later model of its list only
while every earlier one cannot take it (:func:`check_preferences` replays the sends in
their order and verifies it). Within that rule it may hold a prompt in the backlog: for an
earlier model of its list that finishes it sooner (``_Run.held``), and, along the LP
plan, until the models before the plan's choice for it are full, so that it overflows
there (``_Run.waits_for_others``). The router's own greedy rule (the first model with room
now, never holding) is one of the candidates, so the reference is never slower than it.
Treating the list as a set (the default) lets the reference
send a prompt to a later, faster model while its first choice has room, which no
preference-keeping schedule may: on a workload with ordered lists the default reference
is faster than any of them can be, and the preference-keeping one is the fairer yardstick
for a router that keeps the order. Prompts without a list keep the earliest-finish choice.

:func:`blind_reference_schedule` is the same simulation under the same limits with the
costs unknown: its choices read only what a router can know before a call answers
(``Instance.expected``: the prompt's input tokens + the model's 95th percentile of output,
and the model's mean latency), and the calls are charged their real draws. A call holds
its reservation in the scheduler's count of the tpm window until it ends, then its real
tokens (settled, as the router's engine settles a lease), and a call in flight is expected
to end its expected latency after its send (once past that, its expected latency again
from now: all that is known of a call that strayed is that it is still running). The
strict backend counts real tokens from the send, so a call whose real tokens overran the
window its reservation fit in is refused (counted in ``Schedule.refused``) and waits to be
tried again, as a router's call is after a 429. Its order (and plan) is chosen as the
clairvoyant one's is, but judged on the expected instance (every draw at its
expectation), not on the draws. What it makes is achievable by a policy that knows only
what a router knows: between it and the clairvoyant reference lies the part of the gap
that only knowing the draws closes, or a better policy.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from llm_router_devkit.yardstick.instance import Instance

__all__ = ["Schedule", "blind_reference_schedule", "check_preferences", "check_schedule",
           "reference_schedule"]

#: Waiting prompts looked at past one that chose to wait, per moment and model set.
LOOKAHEAD = 64
#: The local search's rounds from the best order (see :func:`_improved`), and the shares
#: of the makespan, tried in turn, whose prompts a round moves to the front.
ROUNDS = 14
TAILS = (0.1, 0.03, 0.01, 0.003)
_EPS = 1e-9


@dataclass(frozen=True)
class Schedule:
    """``sends[i] = (model, send time)``; ``makespan_s``: when the last call ends;
    ``refused``: sends a strict backend refused (real tokens over a tpm window that the
    reservation fit in; only with costs unknown), each tried again later."""

    sends: tuple[tuple[str, float], ...]
    makespan_s: float
    order: str
    refused: int = 0
    #: the prompts in the order they were sent (sends at one moment in the order the
    #: scheduler made them: what :func:`check_preferences` replays); empty: by send time
    sequence: tuple[int, ...] = ()


class _Call:
    """One send: its real tokens and end, what the scheduler counts of it in the window
    (its reservation until it ends, then its real tokens) and its expected latency."""

    __slots__ = ("counted", "end", "expected", "sent", "tokens")

    def __init__(self, sent: float, cost: tuple[int, float], known: tuple[int, float]) -> None:
        self.sent = sent
        self.tokens, self.end = cost[0], sent + cost[1]
        self.counted, self.expected = known

    def __lt__(self, other: _Call) -> bool:
        return self.end < other.end

    def expected_end(self, t: float) -> float:
        """When the scheduler expects it to end, at ``t``: its expected latency after the
        send, or, once past that, its expected latency again from ``t`` (all it knows of a
        call that strayed is that it is still running)."""
        end = self.sent + self.expected
        return end if end > t + _EPS else t + self.expected


class _Model:
    """One model's sends in the last window and its calls in flight, as the backend counts
    them (real tokens and ends) and as the scheduler does (reservations until a call ends,
    expected ends): the same when the costs are known."""

    def __init__(self, name: str, instance: Instance) -> None:
        self.name = name
        self.instance = instance
        self.window: deque[_Call] = deque()
        self.tokens = 0  # real tokens in the window
        self.counted = 0  # the scheduler's count of them
        self.flying: list[_Call] = []  # heap by real end
        # The concurrency wait depends only on the time, the calls in flight and whose
        # count is asked; at one moment every waiting prompt asks it of every model it
        # allows, so it is kept until a send or an end changes the calls in flight
        # (sorting every flying call's end per ask was most of the schedule's time).
        self._flights = 0  # bumped whenever `flying` changes
        self._slot: tuple[float, int, bool, int, float] | None = None

    def expire(self, t: float) -> None:
        """Drop the sends that left the window and the calls that ended by ``t``; an ended
        call still in the window counts its real tokens from now on (settled)."""
        w = self.instance.limits[self.name].window_s
        while self.window and self.window[0].sent <= t - w + _EPS:
            call = self.window.popleft()
            self.tokens -= call.tokens
            self.counted -= call.counted
        while self.flying and self.flying[0].end <= t + _EPS:
            call = heapq.heappop(self.flying)
            self._flights += 1
            if call.sent > t - w + _EPS:
                self.counted += call.tokens - call.counted
            call.counted = call.tokens

    def earliest(self, t: float, tokens: int, real: bool = False) -> float:
        """The earliest send time >= t for a call of ``tokens`` (inf if it never fits), as
        the scheduler judges it (reservations for the calls in flight, their expected
        ends), or, with ``real``, as the backend counts (real tokens, real ends). The two
        agree when the costs are known."""
        limits = self.instance.limits_at(self.name, t)
        w = limits.window_s
        s = t
        if limits.rpm is not None and len(self.window) >= limits.rpm:
            s = max(s, self.window[len(self.window) - limits.rpm].sent + w)
        if limits.tpm is not None:
            if tokens > limits.tpm:
                return math.inf
            excess, j = (self.tokens if real else self.counted) + tokens - limits.tpm, 0
            while excess > 0 and j < len(self.window):
                excess -= self.window[j].tokens if real else self.window[j].counted
                j += 1
            if excess > 0:
                return math.inf
            if j:
                s = max(s, self.window[j - 1].sent + w)
        cap = limits.max_concurrency
        if cap is not None and len(self.flying) >= cap:
            s = max(s, self._slot_free(t, cap, real))
        if s > t + _EPS:  # the limits in force then may differ: ask again from there
            return s if self.instance.change_at_s is None else max(s, self._recheck(s, tokens))
        return t

    def _slot_free(self, t: float, cap: int, real: bool) -> float:
        """When, as seen at ``t``, enough calls in flight have ended to leave fewer than
        ``cap`` (at least ``cap`` are in flight)."""
        key = (t, self._flights, real, cap)
        if self._slot is not None and self._slot[:4] == key:
            return self._slot[4]
        ends = [c.end if real else c.expected_end(t) for c in self.flying]
        free = heapq.nsmallest(len(ends) - cap + 1, ends)[-1]
        self._slot = (*key, free)
        return free

    def _recheck(self, s: float, tokens: int) -> float:
        limits = self.instance.limits_at(self.name, s)
        if limits.tpm is not None and tokens > limits.tpm:
            return math.inf
        return s

    def send(self, t: float, cost: tuple[int, float], known: tuple[int, float]) -> float:
        """Send a call of real ``cost`` (tokens, latency) that the scheduler expects to be
        ``known`` (tokens reserved, latency); when it ends."""
        call = _Call(t, cost, known)
        self.window.append(call)
        self.tokens += call.tokens
        self.counted += call.counted
        heapq.heappush(self.flying, call)
        self._flights += 1
        return call.end

    def next_change(self) -> float:
        """When this model next frees capacity or settles a call (inf: it holds none)."""
        w = self.instance.limits[self.name].window_s
        times = [self.window[0].sent + w] if self.window else []
        if self.flying:
            times.append(self.flying[0].end)
        return min(times, default=math.inf)


class _Run:
    """One simulation: the clock, the models, who waits and who was sent where. Its choices
    read ``known``: the real costs, or, with ``blind``, the expected ones
    (``Instance.expected``); the calls are charged the real costs either way."""

    def __init__(self, instance: Instance, order: Sequence[int], ordered: bool,
                 blind: bool = False, hold: bool = False,
                 targets: Sequence[str | None] = ()) -> None:
        self.instance = instance
        self.ordered = ordered
        self.hold = hold
        self.targets = targets
        self.aimed_held = False  # a prompt was held for others to fill a model
        # prompts not sent yet by the model they aim at (``targets``)
        self.aiming: dict[str, int] = {}
        for target in targets:
            if target is not None:
                self.aiming[target] = self.aiming.get(target, 0) + 1
        self.sequence: list[int] = []
        self.known = instance.expected if blind else instance.cost
        self.refused = 0
        self.models = {m: _Model(m, instance) for m in instance.models}
        self.rank = {i: r for r, i in enumerate(order)}
        # prompts waiting, by model set (a tuple: an ordered list, kept as such)
        self.waiting: dict[frozenset[str] | tuple[str, ...], list[int]] = {}
        self.arrivals = deque(sorted(range(instance.size),
                                     key=lambda i: (instance.arrival(i), self.rank[i])))
        self.sends: list[tuple[str, float] | None] = [None] * instance.size
        self.t = self.makespan = 0.0
        self.left = instance.size
        self.wakes: list[float] = []

    def admit_arrivals(self) -> None:
        while self.arrivals and self.instance.arrival(self.arrivals[0]) <= self.t + _EPS:
            i = self.arrivals.popleft()
            key = self.preferred(i) or frozenset(self.instance.cost[i])
            group = self.waiting.setdefault(key, [])
            bisect.insort(group, i, key=self.rank.__getitem__)

    def preferred(self, i: int) -> tuple[str, ...]:
        """Prompt i's ordered list if this run keeps preferences (empty: choose freely)."""
        return self.instance.preferred(i) if self.ordered else ()

    def choice(self, i: int) -> tuple[str, float]:
        """Where prompt i goes and when it could be sent there (if later than now, it waits
        and decides again then)."""
        order = self.preferred(i)
        if not order:
            return self.best(i)
        if not self.hold:
            return self.first_with_room(i, order)
        if self.targets and self.waits_for_others(i, order):
            return order[0], math.inf
        return self.held(i, order)

    def waits_for_others(self, i: int, order: Sequence[str]) -> bool:
        """Whether prompt i, aimed at a later model of its list than the first with room
        now, is held until that one is full: while prompts aimed at it are still to be
        sent (they will fill it; once none is, the prompt decides as :meth:`held`)."""
        target = self.targets[i]
        if target is None:
            return False
        for name in order:
            if name == target:
                return False
            if self.models[name].earliest(self.t, self.known[i][name][0]) <= self.t + _EPS:
                return self.aiming.get(name, 0) > 0
        return False

    def first_with_room(self, i: int, order: Sequence[str]) -> tuple[str, float]:
        """The first model of ``order`` that can take prompt i now; if none can, its first
        model and the earliest moment any of them can (the prompt decides again then, in
        list order: the model free at that moment need not be the one it takes)."""
        soonest = math.inf
        for name in order:
            s = self.models[name].earliest(self.t, self.known[i][name][0])
            if s <= self.t + _EPS:
                return name, self.t
            soonest = min(soonest, s)
        if math.isinf(soonest):
            raise ValueError(f"prompt {i} fits on none of its models")
        return order[0], soonest

    def held(self, i: int, order: Sequence[str]) -> tuple[str, float]:
        """The model of ``order`` that finishes prompt i earliest among those it may take:
        the first with room now, sent now, or one before it, sent when that has room (the
        prompt is held until then and decides again; a model after the first with room is
        never taken while that has room). None with room: any of them, when it has room."""
        best, when = "", math.inf
        for name in order:
            tokens, latency = self.known[i][name]
            s = self.models[name].earliest(self.t, tokens)
            if s + latency < when:
                best, when = name, s + latency
            if s <= self.t + _EPS:
                break
        if not best:
            raise ValueError(f"prompt {i} fits on none of its models")
        return best, when - self.known[i][best][1]

    def best(self, i: int) -> tuple[str, float]:
        """The model that finishes prompt i earliest, and when it could be sent there."""
        best, when = "", math.inf
        for name, (tokens, latency) in self.known[i].items():
            s = self.models[name].earliest(self.t, tokens)
            if s + latency < when:
                best, when = name, s + latency
        if not best:
            raise ValueError(f"prompt {i} fits on none of its models")
        return best, when - self.known[i][best][1]

    def send_ready(self, group: list[int]) -> None:
        """Send the prompts of ``group`` whose chosen model can take them now; the others wait
        (looking at most :data:`LOOKAHEAD` waiting ones past the first, not counting those
        held until other prompts fill a model). With costs unknown, the backend may refuse
        a send the scheduler's count allows (real tokens over the window): the prompt waits
        and decides again at the next event."""
        kept: list[int] = []
        held = 0
        for pos, i in enumerate(group):
            if len(kept) - held >= LOOKAHEAD:
                kept.extend(group[pos:])
                break
            name, send_at = self.choice(i)
            model = self.models[name]
            cost = self.instance.cost[i][name]
            if send_at <= self.t + _EPS and model.earliest(self.t, cost[0], real=True) \
                    <= self.t + _EPS:
                self.makespan = max(self.makespan,
                                    model.send(self.t, cost, self.known[i][name]))
                self.sends[i] = (name, self.t)
                self.sequence.append(i)
                self.left -= 1
                target = self.targets[i] if self.targets else None
                if target is not None:
                    self.aiming[target] -= 1
                continue
            kept.append(i)
            if math.isinf(send_at):
                held += 1
                self.aimed_held = True
            elif send_at > self.t + _EPS:
                self.wakes.append(send_at)
            else:
                self.refused += 1
        group[:] = kept

    def advance(self) -> None:
        """Move the clock to the next moment something could change."""
        nexts = [m.next_change() for m in self.models.values()]
        if self.arrivals:
            nexts.append(self.instance.arrival(self.arrivals[0]))
        if self.instance.change_at_s is not None:
            nexts.append(self.instance.change_at_s)
        nexts.extend(self.wakes)
        self.wakes = []
        later = [x for x in nexts if self.t + _EPS < x < math.inf]
        if not later:
            raise RuntimeError("the reference schedule is stuck: nothing frees capacity")
        self.t = min(later)


def _simulate(instance: Instance, order: Sequence[int], name: str,
              ordered: bool = False, blind: bool = False, hold: bool = False,
              targets: Sequence[str | None] = ()) -> Schedule:
    """The schedule of one order; ``blind``: its choices read the expected costs;
    ``hold``: a listed prompt may be held for an earlier model of its list
    (:meth:`_Run.held`) rather than sent to the first with room, and, with ``targets``
    (a model per prompt or None), until a model before its target is full
    (:meth:`_Run.waits_for_others`)."""
    run = _Run(instance, order, ordered, blind, hold, targets)
    while True:
        run.admit_arrivals()
        for m in run.models.values():
            m.expire(run.t)
        while True:  # again while a prompt held for others to fill a model saw sends
            left, run.aimed_held = run.left, False
            for group in run.waiting.values():
                run.send_ready(group)
            if run.left == left or not run.aimed_held:
                break
        if not run.left:
            break
        run.advance()
    return Schedule(sends=tuple(s for s in run.sends if s is not None),
                    makespan_s=run.makespan, order=name, refused=run.refused,
                    sequence=tuple(run.sequence))


def _orders(instance: Instance) -> dict[str, list[int]]:
    """The orders tried, from the instance's costs (for the reference with costs unknown,
    the expected instance's)."""

    def fastest(i: int) -> float:
        return min(lat for _, lat in instance.cost[i].values())

    n = range(instance.size)
    return {
        "as given": list(n),
        "longest first": sorted(n, key=lambda i: -fastest(i)),
        "most restricted first": sorted(n, key=lambda i: (len(instance.cost[i]), -fastest(i))),
    }


def reference_schedule(instance: Instance, plan: Sequence[Mapping[str, float]] = (), *,
                       ordered: bool = False) -> Schedule:
    """The best of the greedy earliest-finish schedules over a few prompt orders.

    :param plan: where the LP relaxation sends each prompt (``LPBound.plan``); if given,
        the same orders are also tried with each prompt kept to the models of its plan
        (the plan shares scarce models out over the whole backlog, which the greedy choice,
        deciding one prompt at a time, does not).
    :param ordered: keep each prompt's ordered preference list (``Instance.preference``):
        first model with room now, in list order (see the module's docstring). The plan
        then restricts only the prompts without a list: a list cut to the plan's models
        would skip its first choice while it has room. Without lists, the same schedule.
    """
    return checked(instance, _best(instance, plan, ordered, lambda inst: inst)[3],
                   ordered=ordered)


def blind_reference_schedule(instance: Instance, plan: Sequence[Mapping[str, float]] = (),
                             *, ordered: bool = False) -> Schedule:
    """The reference with costs unknown: the greedy earliest-*expected*-finish schedule
    (``Instance.expected``), charged the real draws (see the module's docstring).

    It tries the orders (and plan) :func:`reference_schedule` tries, each on the expected
    instance (:meth:`Instance.as_expected`), and plays the best of them out on the real
    draws once: the choice of order may not look at the draws either. When every draw
    equals its expectation it is the clairvoyant reference.

    :param plan: as for :func:`reference_schedule`, but the LP plan of the *expected*
        instance (``lp_bound(instance.as_expected()).plan``): one from the real draws
        would know them.
    :param ordered: as for :func:`reference_schedule`.
    :raises ValueError: the instance has no expected costs.
    """
    inst, order, rule, guess = _best(instance, plan, ordered, Instance.as_expected)
    return checked(instance, _simulate(inst, order, guess.order, ordered and instance.ordered,
                                       blind=True, hold=rule[0], targets=rule[1]))


#: How a run treats the listed prompts: held or not (``_Run.held``), aimed at the LP
#: plan's main model or not (``_Run.waits_for_others``).
_Rule = tuple[bool, tuple[str | None, ...]]


def _best(instance: Instance, plan: Sequence[Mapping[str, float]], ordered: bool,
          judged: Callable[[Instance], Instance]
          ) -> tuple[Instance, list[int], _Rule, Schedule]:
    """The candidate instance (``instance`` or kept to its plan), prompt order and rule for
    listed prompts whose schedule of the ``judged`` instance (``instance`` itself, or
    what the scheduler expects of it) ends first, improved by :func:`_improved`, and that
    schedule.

    Listed prompts are held for an earlier model of their list when it finishes them
    sooner (``_Run.held``; not holding is never faster on the workloads measured, so only
    the bare instance tries it), and, along the plan, held until the models before the
    plan's main model are full (``_Run.waits_for_others``)."""
    ordered = ordered and instance.ordered
    candidates = [(instance, "", [(False, ""), (True, ", held")] if ordered else [(False, "")])]
    if plan:
        aimed = _targets(instance, plan) if ordered else ()
        rules = [(True, ", held"), (True, ", aimed at the plan")] if ordered else [(False, "")]
        candidates.append((_planned(instance, plan, 0.1, ordered), ", LP plan", rules))
        candidates.append((_planned(instance, plan, 1.0, ordered), ", LP plan's main model",
                           rules))
    best: tuple[Instance, list[int], _Rule, Schedule] | None = None
    for inst, label, tried in candidates:
        seen = judged(inst)
        for name, order in _orders(seen).items():
            for hold, how in tried:
                rule = (hold, aimed if how == ", aimed at the plan" else ())
                schedule = _simulate(seen, order, name + label + how, ordered, hold=rule[0],
                                     targets=rule[1])
                if best is None or schedule.makespan_s < best[3].makespan_s:
                    best = inst, order, rule, schedule
    assert best is not None
    return _improved(judged, ordered, *best)


def _targets(instance: Instance, plan: Sequence[Mapping[str, float]]
             ) -> tuple[str | None, ...]:
    """Each listed prompt's target: the model of its list its plan gives the most of it
    (None: a prompt without a list)."""
    targets: list[str | None] = []
    for i, shares in enumerate(plan):
        order = instance.preferred(i)
        inside = {m: x for m, x in shares.items() if m in order}
        targets.append(max(inside, key=inside.__getitem__) if inside else None)
    return tuple(targets)


def _improved(judged: Callable[[Instance], Instance], ordered: bool, inst: Instance,
              order: list[int], rule: _Rule, schedule: Schedule
              ) -> tuple[Instance, list[int], _Rule, Schedule]:
    """A local search from the best schedule found: the prompts whose calls end in the
    last share of the makespan (each of :data:`TAILS` in turn) move to the front of the
    order, and the first new order whose schedule ends sooner is kept, for at most
    :data:`ROUNDS` rounds (stopping at the first where no share helps)."""
    seen = judged(inst)
    for k in range(ROUNDS):
        ends = {i: sent + seen.cost[i][model][1]
                for i, (model, sent) in enumerate(schedule.sends)}
        for tail in TAILS:
            late = sorted((i for i, end in ends.items()
                           if end >= schedule.makespan_s * (1 - tail)), key=lambda i: -ends[i])
            moved = set(late)
            trial = late + [i for i in order if i not in moved]
            label = schedule.order.split(", tail first")[0] + f", tail first x{k + 1}"
            tried = _simulate(seen, trial, label, ordered, hold=rule[0], targets=rule[1])
            if tried.makespan_s < schedule.makespan_s - _EPS:
                order, schedule = trial, tried
                break
        else:
            break
    return inst, order, rule, schedule


def _planned(instance: Instance, plan: Sequence[Mapping[str, float]],
             least: float, ordered: bool = False) -> Instance:
    """``instance`` with each prompt allowed only the models its plan gives at least
    ``least`` of it (always its largest share); with ``ordered``, the prompts with an
    ordered list keep all of it. A list cut to fewer models keeps their order."""
    cost = []
    expected = []
    preference = []
    for i, (options, shares) in enumerate(zip(instance.cost, plan, strict=True)):
        order = instance.preferred(i)
        if ordered and order:
            kept = list(options)
        else:
            top = max(shares.values(), default=0.0)
            kept = [m for m, x in shares.items() if x >= min(least, top) and m in options]
            kept = kept or list(options)
        cost.append({m: options[m] for m in kept})
        if instance.expected:
            expected.append({m: instance.expected[i][m] for m in kept})
        preference.append(tuple(m for m in order if m in kept))
    return replace(instance, cost=tuple(cost), expected=tuple(expected),
                   preference=tuple(preference) if instance.preference else ())


def check_schedule(instance: Instance, schedule: Schedule) -> list[str]:
    """Every way ``schedule`` breaks the instance's limits or leaves a prompt unsent or
    sent twice (empty: it is valid)."""
    problems = []
    if len(schedule.sends) != instance.size:
        problems.append(f"{len(schedule.sends)} sends for {instance.size} prompts")
    if schedule.sequence and sorted(schedule.sequence) != list(range(instance.size)):
        problems.append("the send sequence does not name each prompt once")
    by_model: dict[str, list[tuple[float, int, float]]] = {}
    for i, (model, sent) in enumerate(schedule.sends):
        if model not in instance.cost[i]:
            problems.append(f"prompt {i} sent to {model}, which it does not allow")
            continue
        if sent < instance.arrival(i) - _EPS:
            problems.append(f"prompt {i} sent at {sent:.3f} before it arrived")
        tokens, latency = instance.cost[i][model]
        by_model.setdefault(model, []).append((sent, tokens, latency))
    for model, calls in by_model.items():
        calls.sort()
        for k, (t, _, _) in enumerate(calls):
            limits = instance.limits_at(model, t)
            inside = [c for c in calls[: k + 1] if c[0] > t - limits.window_s + _EPS]
            if limits.rpm is not None and len(inside) > limits.rpm:
                problems.append(f"{model}: {len(inside)} sends in the window ending {t:.3f}")
            if limits.tpm is not None and sum(c[1] for c in inside) > limits.tpm:
                problems.append(f"{model}: over tpm in the window ending {t:.3f}")
            flying = sum(1 for c in calls[: k + 1] if c[0] + c[2] > t + _EPS)
            if limits.max_concurrency is not None and flying > limits.max_concurrency:
                problems.append(f"{model}: {flying} calls in flight at {t:.3f}")
    return problems


def check_preferences(instance: Instance, schedule: Schedule) -> list[str]:
    """Every send of ``schedule`` that breaks a prompt's ordered preference list (empty:
    it keeps them all): a prompt sent to a model of its list while an earlier one could
    have taken it then (its limits in force, the sends before it in ``sequence``: rpm,
    tpm and concurrency all with room). Holding a prompt is no breach: only where it goes
    when it is sent. Without ``sequence``, sends at one moment count in prompt order."""
    sequence = schedule.sequence or tuple(
        sorted(range(len(schedule.sends)), key=lambda i: (schedule.sends[i][1], i)))
    before: dict[str, list[tuple[float, int, float]]] = {m: [] for m in instance.models}
    problems = []
    for i in sequence:
        model, t = schedule.sends[i]
        for earlier in instance.preferred(i)[: instance.preferred(i).index(model)] \
                if model in instance.preferred(i) else ():
            if _has_room(instance, before[earlier], earlier, t, instance.cost[i][earlier][0]):
                problems.append(f"prompt {i} sent to {model} at {t:.3f} while {earlier}, "
                                "earlier in its list, could take it")
                break
        if model in before:
            before[model].append((t, instance.cost[i][model][0], t + instance.cost[i][model][1]))
    return problems


def _has_room(instance: Instance, calls: Sequence[tuple[float, int, float]], model: str,
              t: float, tokens: int) -> bool:
    """Whether ``model``, with ``calls`` (send, tokens, end) already sent, takes a call of
    ``tokens`` at ``t`` under the limits in force then."""
    limits = instance.limits_at(model, t)
    inside = [c for c in calls if t - limits.window_s + _EPS < c[0] <= t + _EPS]
    if limits.rpm is not None and len(inside) + 1 > limits.rpm:
        return False
    if limits.tpm is not None and sum(c[1] for c in inside) + tokens > limits.tpm:
        return False
    flying = sum(1 for c in calls if c[0] <= t + _EPS and c[2] > t + _EPS)
    return limits.max_concurrency is None or flying + 1 <= limits.max_concurrency


def checked(instance: Instance, schedule: Schedule, *, ordered: bool = False) -> Schedule:
    """``schedule`` if it keeps every limit, sends each prompt once and, with ``ordered``,
    keeps each prompt's ordered preference list; else a RuntimeError naming each breach
    (a reference that breaks the rule it claims to keep is no yardstick)."""
    problems = check_schedule(instance, schedule)
    if ordered and instance.ordered:
        problems += check_preferences(instance, schedule)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more"
                                           if len(problems) > 5 else "")
        raise RuntimeError(f"the reference schedule ({schedule.order}) breaks the rule it "
                           f"keeps: {shown}")
    return schedule
