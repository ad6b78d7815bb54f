"""A scheduling instance: each prompt's own cost on each model it allows, and the limits.

Built from the simulator's deterministic draws (:func:`instance_from_profile`), so the
instance is exactly what the simulator would charge whichever design sends the prompts,
together with what a router can know of those costs before the calls (the distributions'
figures, not the draws). Times are wall-clock seconds from the first possible call (time 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from llm_router_devkit.simulator.profile import SimulatorProfile
from llm_router_devkit.simulator.workload import draw, mean_latency_s, output_tokens_quantile

__all__ = ["RESERVED_QUANTILE", "Instance", "Limits", "instance_from_profile"]

#: The quantile of a model's output tokens a call reserves before it answers, as the
#: router's engine reserves the 95th percentile of the output it learned per model.
RESERVED_QUANTILE = 0.95


@dataclass(frozen=True)
class Limits:
    """One model's limits over a sliding window of ``window_s`` (None: no limit)."""

    window_s: float
    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None


@dataclass(frozen=True)
class Instance:
    """Prompts ``0..n-1``; ``cost[i][m] = (tokens, latency_s)`` for each allowed model m.

    :param limits: each model's limits from time 0.
    :param change_at_s: when ``limits_after`` replace ``limits`` (None: never).
    :param arrivals_s: when each prompt may first be sent (empty: all at time 0).
    :param preference: each prompt's ordered preference list (the models of ``cost[i]``,
        first choice first; empty: any of them, no order), as a router admitting with
        ``ordered=True`` keeps it. Empty: no prompt has one. Only the preference-keeping
        reference schedule reads it; the LP bound and the unordered reference, which may
        send a prompt to any model of its list, are bounds for schedules that keep it too.
    :param expected: what a scheduler that does not know the draws knows of each prompt on
        each model of ``cost[i]``: ``(tokens reserved at admission, expected latency_s)``.
        The reference with costs unknown decides on these and is charged ``cost``. Empty:
        not known (that reference cannot be computed).
    """

    cost: tuple[Mapping[str, tuple[int, float]], ...]
    limits: Mapping[str, Limits]
    limits_after: Mapping[str, Limits] = field(default_factory=dict)
    change_at_s: float | None = None
    arrivals_s: tuple[float, ...] = ()
    preference: tuple[tuple[str, ...], ...] = ()
    expected: tuple[Mapping[str, tuple[int, float]], ...] = ()

    def __post_init__(self) -> None:
        if self.arrivals_s and len(self.arrivals_s) != len(self.cost):
            raise ValueError("arrivals_s: give one arrival per prompt, or none")
        if self.preference and len(self.preference) != len(self.cost):
            raise ValueError("preference: give one list per prompt (empty: no order), or none")
        for i, order in enumerate(self.preference):
            if order and (len(set(order)) != len(order) or set(order) != set(self.cost[i])):
                raise ValueError(f"prompt {i}: its preference {order} must name each of its "
                                 f"models once: {sorted(self.cost[i])}")
        if self.expected and len(self.expected) != len(self.cost):
            raise ValueError("expected: give one mapping per prompt, or none")
        for i, known in enumerate(self.expected):
            if set(known) != set(self.cost[i]):
                raise ValueError(f"prompt {i}: expected costs for {sorted(known)}, but it "
                                 f"allows {sorted(self.cost[i])}")
        for i, options in enumerate(self.cost):
            if not options:
                raise ValueError(f"prompt {i} allows no model of the instance")
            unknown = set(options) - set(self.limits)
            if unknown:
                raise ValueError(f"prompt {i} allows models without limits: {sorted(unknown)}")

    @property
    def size(self) -> int:
        return len(self.cost)

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self.limits)

    def arrival(self, i: int) -> float:
        return self.arrivals_s[i] if self.arrivals_s else 0.0

    def preferred(self, i: int) -> tuple[str, ...]:
        """Prompt i's ordered preference list (empty: any of its models, no order)."""
        return self.preference[i] if self.preference else ()

    @property
    def ordered(self) -> bool:
        """Whether some prompt has an ordered preference list."""
        return any(self.preference)

    def as_expected(self) -> Instance:
        """This instance with every draw equal to what was expected (``cost`` =
        ``expected``): the world a scheduler that does not know the draws plans for."""
        if not self.expected:
            raise ValueError("the instance has no expected costs")
        return replace(self, cost=self.expected)

    def limits_at(self, model: str, t: float) -> Limits:
        """The limits in force on ``model`` at time ``t``."""
        if self.change_at_s is not None and t >= self.change_at_s and model in self.limits_after:
            return self.limits_after[model]
        return self.limits[model]


def instance_from_profile(
    profile: SimulatorProfile,
    prompts: Sequence[str],
    allowed: Sequence[Sequence[str] | None] | None = None,
    *,
    arrivals_s: Sequence[float] = (),
    limits_after: Mapping[str, Limits] | None = None,
    change_at_s: float | None = None,
    max_output_tokens: int | None = None,
    ordered: bool = False,
) -> Instance:
    """The instance the simulator makes of these prompts: each prompt's tokens (input +
    drawn output) and wall-clock latency (``latency * slowdown / time_scale``) on each
    model it allows (``allowed[i]``; None: every model), and the profile's limits over its
    scaled window. Its ``expected`` costs are what a router can know before the calls: input
    + the model's :data:`RESERVED_QUANTILE` of output tokens (the reservation), and the mean
    of the model's latency distribution, scaled the same way.

    :param ordered: each given list is an ordered preference (first choice first, as the
        router's drain admits it): kept as the instance's ``preference``, without the
        models the profile lacks.
    """
    scale = profile.slowdown / profile.time_scale
    window = profile.scaled_window_s
    limits = {m.name: Limits(window, m.rpm, m.tpm, m.max_concurrency) for m in profile.models}
    by_name = {m.name: m for m in profile.models}
    cost = []
    preference: list[tuple[str, ...]] = []
    expected = []
    outlook: dict[tuple[str, float], tuple[int, float]] = {}  # by model and output factor
    for i, prompt in enumerate(prompts):
        given = allowed[i] if allowed is not None else None
        names = given or tuple(by_name)
        options = {}
        known = {}
        for name in names:
            model = by_name.get(name)
            if model is None:
                continue
            d = draw(profile, model, prompt, max_output_tokens)
            options[name] = (d.total_tokens, d.latency_s * scale)
            factor = profile.output_scale(prompt)
            if (name, factor) not in outlook:
                outlook[name, factor] = (
                    output_tokens_quantile(model, RESERVED_QUANTILE, factor, max_output_tokens),
                    mean_latency_s(model, factor, max_output_tokens) * scale)
            reserved, latency = outlook[name, factor]
            known[name] = (d.input_tokens + reserved, latency)
        cost.append(options)
        expected.append(known)
        preference.append(tuple(options) if ordered and given else ())
    return Instance(cost=tuple(cost), limits=limits, limits_after=dict(limits_after or {}),
                    change_at_s=change_at_s, arrivals_s=tuple(arrivals_s),
                    preference=tuple(preference) if any(preference) else (),
                    expected=tuple(expected))
