"""The settings of a solver: one typed object from the DAG to the solver, one name each.

A DAG author gives a :class:`SolveSettings` (prompts given directly) or a
:class:`DrainSettings` (draining the task store), as an object or as a plain dict (which may
hold Jinja templates: the operators validate after rendering). The operator hands it to its
trigger as ``model_dump()``, the trigger validates it again in the triggerer and gives the
object to the solver. Nothing on the way renames a setting or supplies its own default: the
defaults live here alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = ["DrainSettings", "SolveSettings", "parse_settings"]


class SolveSettings(BaseModel):
    """How prompts are solved.

    :param max_in_flight: prompts being admitted or called at once by one solver.
    :param time_budget_s: no new call starts after this long (prompts not admitted by then
        come back ``unfinished``; a drain's tasks return to the backlog).
    :param max_errors: calls ending in 5xx/timeout before a prompt is given up.
    :param max_rate_limited: 429s before a prompt is given up.
    :param backoff_s: first pause after a 5xx/timeout; doubles with each one, with jitter.
    :param batch_size: above 1, prompts admitted on the same model within ``batch_wait_s``
        go to the backend together in one ``POST /batch`` (up to this many), each under its
        own lease. Off by default: a batch answers with its slowest prompt.
    :param batch_wait_s: how long an admitted prompt may wait for batch companions.
    :param max_output_tokens: sent to the backend as each call's output cap (None: the
        backend's own default).
    :param redis_outage_s: how long the solver rides out a Redis outage (retrying with
        backoff) before it gives up and ends with the error.
    :param progress_every_s: how often progress is logged.
    :param hedge_late_calls: a call still out past its model's ``late_after_s`` (about the
        95th percentile of the model's latency, from the engine) while none of this
        solver's prompts waits for admission (the end of a backlog) sends the prompt to
        another allowed model too; the first answer is kept (the other call runs on to its
        end, its answer dropped).
        At most one extra call per prompt, admitted like any call (within every target
        and budget); it is paid for, and it cuts the straggler that would end the
        backlog. See docs/solving.md, "Late calls".
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_in_flight: int = Field(100, ge=1)
    time_budget_s: float = Field(1500.0, gt=0)
    max_errors: int = Field(3, ge=1)
    max_rate_limited: int = Field(20, ge=1)
    backoff_s: float = Field(1.0, ge=0)
    batch_size: int = Field(1, ge=1)
    batch_wait_s: float = Field(0.02, ge=0)
    max_output_tokens: int | None = Field(None, ge=1)
    redis_outage_s: float = Field(180.0, ge=0)
    progress_every_s: float = Field(10.0, gt=0)
    hedge_late_calls: bool = True


class DrainSettings(SolveSettings):
    """How the task store is drained (and how each task's prompt is solved).

    :param claim_batch: the most tasks claimed in one statement (claims happen as slots free).
    :param claim_ttl_s: claims are extended every third of this while their task is in
        progress; a claim not extended (its triggerer died) expires and the task returns to
        the backlog.
    :param linger_s: once the backlog is empty, wait this long (woken by the store's enqueue
        notifications) for new tasks before ending; each arrival restarts the wait.
        0: end at once.
    :param flush_every_s: how often buffered answers are written.
    :param store_outage_s: how long the drain rides out a task store outage (a PostgreSQL
        restart or failover): its store calls are retried with backoff, answers stay
        buffered, and the writes of answers go on past the deadline within it. It must be
        below ``claim_ttl_s`` x 2/3 (claims are extended every third of the TTL), so no
        claim expires during an outage the drain waits out: a larger value is refused.
        Not given: half of ``claim_ttl_s`` (60 s at the default TTL). Past it the drain
        ends with ``TaskStoreUnavailable``.
    :param start_in_worker_s: the deferrable :class:`SolveTaskOperator` first drains in its
        worker for up to this long, then defers: the first calls go out as the task starts,
        not after the triggerer's loop has picked the trigger up (1-2 s). The worker hands
        over as soon as the backlog is empty (the waiting, and ``linger_s``, happen in the
        triggerer) or this time is spent (it claims no more, ends its calls in flight and
        defers); it holds a worker slot meanwhile. 0: defer at once. Ignored elsewhere.
    :param start_in_flight: calls in flight during that start in the worker. None: as
        ``max_in_flight``; 0: as many as the router advises for the backlog (each model's
        window quota at once, capped by the backlog and by what the advised solvers, at
        most 16, would hold), so a task started before the others sends the whole first
        burst alone.
    """

    claim_batch: int = Field(100, ge=1)
    claim_ttl_s: float = Field(120.0, gt=0)
    linger_s: float = Field(0.0, ge=0)
    flush_every_s: float = Field(0.2, gt=0)
    store_outage_s: float = Field(60.0, ge=0)
    start_in_worker_s: float = Field(0.0, ge=0)
    start_in_flight: int | None = Field(None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _outage_default(cls, data: Any) -> Any:
        """No ``store_outage_s`` given: half of ``claim_ttl_s``, so a short TTL alone never
        makes the defaults refuse each other."""
        if isinstance(data, Mapping) and data.get("store_outage_s") is None:
            ttl = data.get("claim_ttl_s", cls.model_fields["claim_ttl_s"].default)
            try:  # a rendered template may give "30"; a wrong value gets its own error
                seconds = float(ttl)
            except (TypeError, ValueError):
                return data
            if seconds > 0 and not isinstance(ttl, bool):
                data = {**data, "store_outage_s": seconds / 2}
        return data

    @model_validator(mode="after")
    def _outage_within_claims(self) -> DrainSettings:
        """An outage ridden out must end before a claim extended just before it lapses."""
        limit = self.claim_ttl_s * 2 / 3
        if self.store_outage_s >= limit:
            raise ValueError(
                f"store_outage_s ({self.store_outage_s:g} s) must be below two thirds of "
                f"claim_ttl_s ({self.claim_ttl_s:g} s, so below {limit:g} s): claims are "
                "extended every third of their TTL and would lapse during an outage the "
                "drain waits out; lower store_outage_s or raise claim_ttl_s")
        return self


S = TypeVar("S", bound=SolveSettings)


def parse_settings(kind: type[S], value: object) -> S:
    """``value`` as a ``kind``, or a ``ValueError`` naming each wrong field and the fix.

    :raises ValueError: e.g. ``settings.max_in_flight: 0 is wrong: Input should be greater
        than or equal to 1``.
    """
    if isinstance(value, kind):
        return value
    if value is None:
        return kind()
    if isinstance(value, SolveSettings):
        value = value.model_dump(exclude_unset=True)
    if not isinstance(value, Mapping):
        raise ValueError(f"settings: give a {kind.__name__} or a dict of its fields, "
                         f"not {type(value).__name__}")
    try:
        return kind.model_validate(dict(value))
    except ValidationError as err:
        problems = []
        for error in err.errors():
            field = ".".join(str(p) for p in error["loc"])
            if not field:  # a rule between fields: its message names them
                problems.append(f"settings: {error['msg'].removeprefix('Value error, ')}")
            elif error["type"] == "extra_forbidden":
                known = ", ".join(kind.model_fields)
                problems.append(f"settings.{field}: not a setting of {kind.__name__} "
                                f"(known: {known})")
            else:
                problems.append(f"settings.{field}: {error.get('input')!r} is wrong: "
                                f"{error['msg']}")
        raise ValueError("; ".join(problems)) from None
