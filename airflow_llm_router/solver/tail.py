"""The end of a backlog: which models to leave out, and in which order to try the rest.

While the backlog is long, every model with capacity should be busy: the slow ones add their
share of throughput. Near its end, a prompt sent to a slow model finishes a whole slow call
later, when faster models could have worked through it and the rest sooner.

With ``W`` prompts left (the backlog plus those waiting for admission) and the models
sorted by latency ``L_1 <= L_2 <= ...`` with sustainable rates ``R_i``, the ``k`` fastest
finish them in about ``T_k = W / (R_1 + ... + R_k) + L_k`` (their combined rate, then the
last call on the slowest of them). The drain keeps the ``k`` that minimises ``T_k`` (for a
long backlog, every model), widened until one of them has room now (a full window can keep
a fast model closed for most of a window), and asks for them fastest first, so each prompt
goes to the fastest of them that can take it now. A prompt that only other models allow,
or that these could never take, keeps its own list.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ModelPace", "tail_models"]


@dataclass(frozen=True)
class ModelPace:
    """What the choice needs of one model.

    :param latency_s: expected latency (None if not known: such a model is left out while
        others are known).
    :param rate_per_s: calls per second its quota sustains (0 for a disabled model).
    :param room: whether it could admit a call now (window and slots not full).
    """

    latency_s: float | None
    rate_per_s: float
    room: bool = True


def tail_models(models: Mapping[str, ModelPace], left: int) -> tuple[str, ...] | None:
    """The models to finish ``left`` prompts on, fastest first, or None to keep them all
    (and the engine's weighted fair share between them)."""
    known = sorted((p.latency_s, name) for name, p in models.items()
                   if p.latency_s is not None and p.rate_per_s > 0)
    if left <= 0 or len(known) < 2:
        return None
    best_t, best_k, total = math.inf, len(known), 0.0
    for k, (lat, name) in enumerate(known, start=1):
        total += models[name].rate_per_s
        t = left / total + lat
        if t < best_t:
            best_t, best_k = t, k
    while best_k < len(known) and not any(models[n].room for _lat, n in known[:best_k]):
        best_k += 1
    if best_k == len(known) and len(known) == len(models):
        return None
    return tuple(name for _lat, name in known[:best_k])
