"""What happens around sending a call, batched: send stamps, and ``POST /batch`` groups.

Both are many small per-call requests that one call serves as well as many, so both run on
the coalescing primitive (:mod:`airflow_llm_router.coalesce`):

- :class:`SendStamps` tells the engine which calls have just reached the wire (``mark_sent``:
  their window entries restart from then), one script call per event-loop turn;
- :class:`MicroBatcher` groups prompts admitted on one model within ``batch_wait_s`` into
  one ``POST /batch`` of up to ``batch_size`` (each still under its own lease).
"""

from __future__ import annotations

import logging
import time

from airflow_llm_router.backend import BackendConfig, BackendHttp, CallResult, call_batch
from airflow_llm_router.coalesce import Coalescer
from airflow_llm_router.engine import AsyncRouterClient
from airflow_llm_router.solver.outage import REDIS_DOWN, RedisOutage

__all__ = ["MicroBatcher", "SendStamps"]

log = logging.getLogger(__name__)


class SendStamps:
    """Stamp calls as sent, in batches; a stamp lost to a Redis outage only leaves a window
    entry at its (earlier) admission time, which is what it would be without stamps."""

    def __init__(self, router: AsyncRouterClient, outage: RedisOutage) -> None:
        self._router = router
        self._outage = outage
        self._stamps: Coalescer[None, tuple[str, float], None] = Coalescer(
            self._send, name="send-stamps")

    def mark(self, lease_id: str) -> None:
        """The call of ``lease_id`` has just been written to the connection."""
        self._stamps.submit_nowait(None, (lease_id, time.monotonic()))

    async def _send(self, _key: None, stamps: list[tuple[str, float]]) -> list[None]:
        """Send the stamps with how long ago each call went out: in a burst of calls the
        stamps wait for the event loop, and a stamp at the script's own time would start
        the call's window entry that much late (measured on W1's first burst: up to 40-90 ms
        for 250-300 calls stamped together), holding the model's next window back by as
        much."""
        lease_ids = [lid for lid, _ in stamps]
        try:
            await self._outage.call(self._mark, stamps, what="send stamps")
        except REDIS_DOWN:
            log.warning("dropped the send stamps of %d calls: Redis unreachable",
                        len(lease_ids))
        return [None] * len(lease_ids)

    async def _mark(self, stamps: list[tuple[str, float]]) -> int:
        now = time.monotonic()  # per attempt: a retry's stamps are only later, never earlier
        return await self._router.mark_sent([lid for lid, _ in stamps],
                                            [now - at for _, at in stamps])

    async def aclose(self) -> None:
        await self._stamps.aclose()


class MicroBatcher:
    """Group prompts admitted on one model into ``POST /batch`` calls."""

    def __init__(self, http: BackendHttp, backend: BackendConfig, stamps: SendStamps, *,
                 batch_size: int, batch_wait_s: float) -> None:
        self._http, self._backend, self._stamps = http, backend, stamps
        self._batches: Coalescer[str, tuple[str, str, int | None], CallResult] = Coalescer(
            self._send, delay_s=batch_wait_s, max_size=batch_size, name="backend-batch")

    async def call(self, model: str, prompt: str, lease_id: str,
                   max_output_tokens: int | None = None) -> CallResult:
        """Solve ``prompt`` on ``model`` in the next ``/batch`` of that model, its output
        capped at ``max_output_tokens`` (None: uncapped)."""
        return await self._batches.submit(model, (prompt, lease_id, max_output_tokens))

    async def _send(self, model: str,
                    items: list[tuple[str, str, int | None]]) -> list[CallResult]:
        def sent() -> None:
            for _prompt, lease_id, _cap in items:
                self._stamps.mark(lease_id)

        return await call_batch(self._http, self._backend, model=model,
                                prompts=[prompt for prompt, _, _ in items],
                                caps=[cap for _, _, cap in items], on_sent=sent)

    async def aclose(self) -> None:
        await self._batches.aclose()
