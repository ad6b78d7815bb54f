"""A triggerer killed mid-drain (``bench.triggerers --kill-triggerer-at``): how soon the
survivor runs the dead one's drains.

Once a share of the backlog is solved, one named triggerer (the second, in
``bench.triggerers``) gets SIGKILL with every process under it (``AirflowStack.kill``: no
clean-up runs, as on a machine that dies). Its triggers keep its job id in the metadata
database's ``trigger`` table until its heartbeat is older than ``[triggerer]
triggerer_health_check_threshold`` (Airflow's default, 30 s: a benchmark keeps it); then a
triggerer with room takes them.
Measured from the kill: when the first and the last of them ran on another triggerer (a
trigger row gone meanwhile had fired: its drain ended). With the spread placement every
survivor has room for them all; capped to its share, a survivor has none, and the drains'
claims come back only after ``claim_ttl_s``.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import psycopg

from llm_router_devkit.stack import AirflowStack

__all__ = ["TriggererKill"]


class TriggererKill:
    """SIGKILL ``component`` at ``at_solved`` answers, then time the takeover of its triggers.

    Airflow's job rows do not say which process is which, so the killed triggerer's job is
    the one whose heartbeat stops at the kill; each trigger's holder is read at the kill
    and polled after it, and a trigger whose holder changed (or whose row is gone) was
    taken over at that poll."""

    def __init__(self, stack: AirflowStack, meta_dsn: str, component: str,
                 at_solved: int) -> None:
        self.stack, self.component, self.at_solved = stack, component, at_solved
        self.conn = psycopg.connect(meta_dsn, autocommit=True)
        self.killed_at: float | None = None
        self.solved_at_kill: int | None = None
        self.held_at_kill: dict[int, int | None] = {}
        self.moved_s: dict[int, float] = {}  # trigger -> seconds from the kill to its move

    def _held(self) -> dict[int, int | None]:
        return {int(t): (int(j) if j is not None else None) for t, j in self.conn.execute(
            "SELECT id, triggerer_id FROM trigger").fetchall()}

    def poll(self, solved: int) -> None:
        """Kill once ``solved`` reaches the mark (and triggers are placed); afterwards,
        note when each trigger moves."""
        if self.killed_at is None:
            held = self._held()
            if solved >= self.at_solved and any(j is not None for j in held.values()):
                self.stack.kill(self.component)
                self.killed_at, self.solved_at_kill = time.time(), solved
                self.held_at_kill = held
            return
        held, since = self._held(), time.time() - self.killed_at
        for trigger, holder in self.held_at_kill.items():
            if trigger not in self.moved_s and held.get(trigger, -1) != holder:
                self.moved_s[trigger] = since

    def victim_job(self) -> int | None:
        """The triggerer job that was alive just before the kill (a heartbeat in the minute
        before it) and has had none since (None: not known)."""
        if self.killed_at is None:
            return None
        rows = self.conn.execute(
            "SELECT id FROM job WHERE job_type = 'TriggererJob' AND "
            "extract(epoch FROM latest_heartbeat) BETWEEN %(t)s - 60 AND %(t)s",
            {"t": self.killed_at}).fetchall()
        return int(rows[0][0]) if len(rows) == 1 else None

    def summary(self) -> dict[str, Any]:
        victim = self.victim_job()
        orphans = [t for t, j in self.held_at_kill.items() if j == victim]
        moved = [self.moved_s[t] for t in orphans if t in self.moved_s]
        return {"killed": self.component, "victim_job": victim,
                "triggers_at_kill": dict(Counter(str(j) for j in self.held_at_kill.values())),
                "triggers_orphaned": len(orphans), "solved_at_kill": self.solved_at_kill,
                "killed_at": self.killed_at,
                "first_taken_over_s": min(moved, default=None),
                "all_taken_over_s": max(moved) if orphans and len(moved) == len(orphans)
                else None}

    def close(self) -> None:
        self.conn.close()
