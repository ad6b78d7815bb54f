"""Bookkeeping of a drain across deferrals: claims in hand, totals, and writing results."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_llm_router.solver.items import SolveItem, SolveResult
from airflow_llm_router.store import ClaimedTask, TaskFailure, TaskResult, TaskStore

__all__ = ["DrainState", "chunk_items", "write_results"]


@dataclass
class DrainState:
    """Everything a drain must remember between deferrals (JSON-safe: trigger kwargs)."""

    started: float
    chunks: int = 0
    solved: int = 0
    failed: int = 0
    dead: int = 0
    released: int = 0
    stale: int = 0
    claims: dict[str, str] = field(default_factory=dict)
    mode: str = "drain"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> DrainState:
        return cls(**doc)

    def summary(self) -> dict[str, Any]:
        return {"solved": self.solved, "failed": self.failed, "dead": self.dead,
                "released": self.released, "stale": self.stale, "chunks": self.chunks,
                "elapsed_s": round(time.time() - self.started, 3)}


def chunk_items(claimed: list[ClaimedTask], max_output_tokens: int | None) -> list[SolveItem]:
    """Solver items for claimed tasks. The request id carries the claim token: a restarted
    trigger of the same claim reuses its leases; a new claim of the task starts afresh."""
    return [
        SolveItem(key=str(t.id), prompt=t.prompt, request_id=f"task-{t.id}:{t.claim_token}",
                  models=t.allowed_models, ordered=True, priority=t.priority,
                  max_output_tokens=max_output_tokens)
        for t in claimed
    ]


def write_results(store: TaskStore, drain: DrainState, results: list[SolveResult],
                  log: logging.Logger | Any) -> None:
    """Write a chunk's results, each fenced by its claim token, in three statements."""
    token = {int(k): v for k, v in drain.claims.items()}
    solved = [TaskResult(int(r.key), token[int(r.key)], r.answer or "", r.model or "",
                         r.input_tokens, r.output_tokens)
              for r in results if r.status == "solved" and int(r.key) in token]
    failed = [TaskFailure(int(r.key), token[int(r.key)], r.error or "failed", r.retryable)
              for r in results if r.status == "failed" and int(r.key) in token]
    unfinished = {int(r.key): token[int(r.key)] for r in results
                  if r.status == "unfinished" and int(r.key) in token}
    written = store.complete_many(solved) if solved else {}
    statuses = store.fail_many(failed) if failed else {}
    released = store.release_many(unfinished) if unfinished else {}
    drain.solved += sum(written.values())
    drain.failed += sum(1 for s in statuses.values() if s is not None)
    drain.dead += sum(1 for s in statuses.values() if s == "dead")
    drain.released += sum(released.values())
    drain.stale += (len(written) - sum(written.values())
                    + sum(1 for s in statuses.values() if s is None)
                    + len(released) - sum(released.values()))
    if drain.stale:
        log.warning("%d results were refused: their claims had expired and were re-claimed",
                    drain.stale)
    drain.claims = {}
