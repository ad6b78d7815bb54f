"""The last of a backlog: which models to leave out once nothing is left to claim.

While a backlog lasts, every model with capacity should be busy: the slow ones add their
share of throughput. Once a drain has claimed the last task, the prompts still waiting for
admission are the end of the run, and a prompt sent to a slow model now finishes a whole
slow call later, when faster models could have worked through it and the rest sooner.

With ``W`` prompts waiting and the models sorted by latency ``L_1 <= L_2 <= ...`` with
sustainable rates ``R_i``, the ``k`` fastest finish them in about
``T_k = W / (R_1 + ... + R_k) + L_k`` (their combined rate, then the last call on the
slowest of them). The drain keeps the ``k`` that minimises ``T_k`` and routes its waiting
prompts to those models only; a prompt that only slower models allow, or that those models
could never take, keeps its own list.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["tail_models"]


def tail_models(models: Mapping[str, tuple[float | None, float]], waiting: int
                ) -> frozenset[str] | None:
    """The models to finish ``waiting`` prompts on, or None to keep them all.

    :param models: per model ``(latency_s, rate_per_s)``: its expected latency (None if not
        known: such a model is left out while others are known) and the calls per second
        its quota sustains (0 for a disabled model).
    :param waiting: prompts not yet admitted.
    """
    known = sorted((lat, rate, name) for name, (lat, rate) in models.items()
                   if lat is not None and rate > 0)
    if waiting <= 0 or len(known) < 2:
        return None
    best_t, best_k, total = math.inf, len(known), 0.0
    for k, (lat, rate, _name) in enumerate(known, start=1):
        total += rate
        t = waiting / total + lat
        if t < best_t:
            best_t, best_k = t, k
    if best_k == len(known) and len(known) == len(models):
        return None
    return frozenset(name for _lat, _rate, name in known[:best_k])
