"""What the backend counts about itself: the source of truth for violations and throughput.

The router never grades itself; benchmarks and tests read these counters through ``/stats``
and ``/timeline``. Arrivals are kept in compact arrays (16 bytes each) so a timeline can be
bucketed at any resolution after the run.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from llm_router_devkit.simulator.limits import REASONS

#: Most buckets ``/timeline`` will build in one answer.
MAX_TIMELINE_BUCKETS = 100_000


@dataclass
class ModelCounters:
    """Counters for one model since the last reset (all times wall-clock seconds).

    ``completed`` counts answers a client could read; a 200 whose body was cut (a truncate
    fault, or a batch cut because one of its items was) counts in ``truncated`` instead, so
    ``completed`` minus the tasks a client solved is the number of answers paid twice.
    """

    requests: int = 0
    accepted: int = 0
    completed: int = 0
    rejected_429: int = 0
    errors: int = 0
    timeouts: int = 0
    truncated: int = 0
    tokens_offered: int = 0
    tokens_accepted: int = 0
    input_tokens_accepted: int = 0
    output_tokens_accepted: int = 0
    latency_sum_s: float = 0.0
    violations: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    # Arrival log for /timeline: time since the epoch, tokens, 1 if accepted else 0.
    times: array[float] = field(default_factory=lambda: array("d"))
    tokens: array[int] = field(default_factory=lambda: array("q"))
    accepted_flags: array[int] = field(default_factory=lambda: array("b"))

    def arrival(self, t: float, tokens: int, reason: str | None) -> None:
        """Count one arrival at ``t`` seconds after the epoch; ``reason`` is None if accepted."""
        accepted = reason is None
        self.requests += 1
        self.tokens_offered += tokens
        self.times.append(t)
        self.tokens.append(tokens)
        self.accepted_flags.append(1 if accepted else 0)
        if accepted:
            self.accepted += 1
            self.tokens_accepted += tokens
        else:
            self.rejected_429 += 1
            if reason in self.violations:
                self.violations[reason] += 1

    def as_dict(self) -> dict[str, Any]:
        """The JSON-ready counters (without the arrival log)."""
        return {
            "requests": self.requests,
            "accepted": self.accepted,
            "completed": self.completed,
            "rejected_429": self.rejected_429,
            "errors": self.errors,
            "timeouts": self.timeouts,
            "truncated": self.truncated,
            "tokens_offered": self.tokens_offered,
            "tokens_accepted": self.tokens_accepted,
            "input_tokens_accepted": self.input_tokens_accepted,
            "output_tokens_accepted": self.output_tokens_accepted,
            "mean_latency_s": self.latency_sum_s / self.completed if self.completed else None,
            "violations": {**self.violations, "total": sum(self.violations.values())},
        }

    def timeline(self, bucket_s: float, n_buckets: int) -> dict[str, list[int]]:
        """Accepted requests, accepted tokens and refused requests per bucket of arrivals."""
        requests = [0] * n_buckets
        tokens = [0] * n_buckets
        rejected = [0] * n_buckets
        last = n_buckets - 1
        for t, tok, ok in zip(self.times, self.tokens, self.accepted_flags, strict=True):
            i = min(int(t / bucket_s), last)
            if ok:
                requests[i] += 1
                tokens[i] += tok
            else:
                rejected[i] += 1
        return {"requests": requests, "tokens": tokens, "rejected": rejected}
