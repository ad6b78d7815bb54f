"""How a drain's run is timed, and its speed judged against a yardstick schedule.

The benchmark's headline (``bench.e2e``; docs/benchmarks.md, "What is timed, from when")
and the demo's report time a run the same way, with these definitions, each to the last
answer written in the task store:

- **from the DAG run's start** (the headline): from the run's ``queued_at``, when Airflow
  has the run (``dag.test()`` makes its run running at once, with no ``queued_at``: there
  it is the run's ``created_at``);
- **from the first claim**: from the first tasks a solver claimed (the claim log of
  :mod:`llm_router_devkit.claim_log`);
- **from the first call** (the makespan): from the first call the backend received (the
  start of its bucket in the backend's timeline). It leaves out the drains' start-up, as a
  reference schedule starts at its first send.

All stamps are seconds on one clock (the simulator's since its stats reset, or epoch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FROM_FIRST_CALL",
    "FROM_FIRST_CLAIM",
    "FROM_RUN_START",
    "Timed",
    "first_arrival_s",
    "speed_share",
    "timed",
]

#: The three starts, in the words of the benchmark's tables and the demo's report.
FROM_RUN_START = "from the DAG run's start"
FROM_FIRST_CLAIM = "from the first claim"
FROM_FIRST_CALL = "from the first call"


def first_arrival_s(timeline: Mapping[str, Any], after_s: float = 0.0) -> float | None:
    """Start of the first bucket at or after ``after_s`` in which any model saw an arrival
    (accepted or refused) in a simulator ``/timeline`` document; None if none did."""
    bucket = float(timeline["bucket_s"])
    start = int(after_s / bucket)
    first: int | None = None
    for series in timeline["models"].values():
        arrivals = [a + r for a, r in zip(series["requests"], series["rejected"], strict=True)]
        index = next((i for i in range(start, len(arrivals)) if arrivals[i]), None)
        if index is not None and (first is None or index < first):
            first = index
    return None if first is None else first * bucket


@dataclass(frozen=True)
class Timed:
    """One run timed from each start to its end (seconds; None: the start not recorded)."""

    from_run_start_s: float | None
    from_first_claim_s: float | None
    from_first_call_s: float

    @property
    def before_first_call_s(self) -> float | None:
        """What the first call's figure leaves out: the DAG run's start to the first call."""
        if self.from_run_start_s is None:
            return None
        return self.from_run_start_s - self.from_first_call_s


def timed(end: float, *, first_call: float, run_start: float | None,
          first_claim: float | None) -> Timed:
    """:class:`Timed` for a run that ended at ``end`` (its last answer written, or where
    it was cut short), every stamp on the same clock."""
    return Timed(from_run_start_s=None if run_start is None else end - run_start,
                 from_first_claim_s=None if first_claim is None else end - first_claim,
                 from_first_call_s=end - first_call)


def speed_share(yardstick_s: float, made_s: float, finished: bool) -> float | None:
    """The run's speed as a share of a schedule taking ``yardstick_s``: ``yardstick_s /
    made_s`` (0.9: the run took 1/0.9 of the schedule's time); None if the run did not
    finish, or took no time."""
    return yardstick_s / made_s if finished and made_s > 0 else None
