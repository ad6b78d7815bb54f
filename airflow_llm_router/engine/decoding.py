"""Read what the Lua scripts answer: text from Redis bytes, a decision per admission
request, a completion's status.

Kept apart from :mod:`~airflow_llm_router.engine.core` (which script to run, with which
arguments) as :mod:`~airflow_llm_router.engine.encoding` is: the reply formats are the
scripts' (documented at the top of each ``lua/*.lua``), and this is the one place that
reads them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from airflow_llm_router.engine.types import Admission, AdmitRequest, Rejection, Wait

__all__ = ["Decision", "complete_status", "decode_decision", "text"]

Decision = Admission | Wait | Rejection

_COMPLETE_STATUS = {0: "unknown", 1: "released", 2: "settled"}


def text(value: Any) -> str:
    """A reply value as text (Redis answers bytes unless the client decodes them)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _seconds_or_none(ms: Any) -> float | None:
    """A script's duration in ms as seconds; a negative one means unknown (None)."""
    value = int(ms)
    return None if value < 0 else value / 1000


def decode_decision(request: AdmitRequest, reply: Sequence[Any], jitter: float) -> Decision:
    """``admit.lua``'s answer to ``request``: an admission, a wait (stretched by up to
    ``jitter`` of itself, so waiters woken together do not all come back at once) or a
    rejection."""
    kind = text(reply[0])
    if kind == "A":
        return Admission(
            model=text(reply[1]),
            lease_id=text(reply[2]),
            lease_ttl_s=int(reply[3]) / 1000,
            request_id=request.request_id,
            reused=bool(int(reply[4])),
            late_after_s=_seconds_or_none(reply[5]) if len(reply) > 5 else None,
        )
    if kind == "W":
        stretch = 1 + random.uniform(0, jitter)
        return Wait(
            retry_after_ms=max(1, math.ceil(int(reply[1]) * stretch)),
            reason=text(reply[2]),
            request_id=request.request_id,
        )
    return Rejection(reason=text(reply[1]), detail=text(reply[2]),
                     request_id=request.request_id)


def complete_status(code: Any) -> str:
    """``complete.lua``'s status of one completion: ``released``, ``settled`` (the lease
    had expired, or the completion is a retry) or ``unknown``."""
    return _COMPLETE_STATUS[int(code)]
