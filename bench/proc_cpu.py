"""The CPU other processes spend over a benchmark's run, per side (Redis, the simulator,
the PostgreSQL backends of the run), read from ``/proc/<pid>/stat`` (Linux).

A solver's own CPU (``getrusage``) says what one triggerer can do; projecting N
triggerers on N cores needs what each answer costs the processes it talks to as well,
since on one machine they share the cores, and on a deployment they bound on their own
(one Redis thread, the simulator standing in for the Models Backend). A PostgreSQL
backend exists only while its connection does, so the run's backends (those whose
``application_name`` names the run) are sampled every ``interval_s`` from
``pg_stat_activity``; each one's CPU is its whole life's (it was opened for the run), up
to its last sample: a backend that closes between two samples loses at most that
interval's CPU.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

__all__ = ["PgBackends", "ProcessCpu", "cpu_s"]

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (all its threads), or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its end
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime (fields 14, 15)


class ProcessCpu:
    """CPU seconds spent by named processes between :meth:`start` and :meth:`stop`."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self._pids = {side: pid for side, pid in pids.items() if pid is not None}
        self._start: dict[str, float] = {}
        self.spent: dict[str, float] = {}

    def start(self) -> None:
        self._start = {side: cpu_s(pid) or 0.0 for side, pid in self._pids.items()}

    def stop(self) -> dict[str, float]:
        self.spent = {side: (cpu_s(pid) or 0.0) - self._start[side]
                      for side, pid in self._pids.items()}
        return self.spent


class PgBackends:
    """The CPU of the PostgreSQL backends whose ``application_name`` is ``name``, sampled
    in a thread of its own over its own connection (not counted) while the run lasts."""

    def __init__(self, dsn: str, name: str, interval_s: float = 0.05) -> None:
        self._dsn, self._name, self._interval_s = dsn, name, interval_s
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="pg-cpu", daemon=True)
        self._error: BaseException | None = None

    def __enter__(self) -> PgBackends:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        import psycopg

        try:
            with psycopg.connect(self._dsn, autocommit=True) as conn:
                while True:
                    self._read(conn)
                    if self._stop.wait(self._interval_s):
                        self._read(conn)
                        return
        except BaseException as err:  # surfaced by ``spent``
            self._error = err

    def _read(self, conn: psycopg.Connection[Any]) -> None:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (self._name,)).fetchall()
        for (pid,) in rows:
            cpu = cpu_s(pid)
            if cpu is not None:
                self._last[pid] = cpu

    @property
    def backends(self) -> int:
        """How many backends of the run were seen."""
        return len(self._last)

    def spent(self) -> float:
        """CPU seconds of the run's backends, each up to its last sample.

        :raises RuntimeError: the sampler failed (no figure rather than a wrong one).
        """
        if self._error is not None:
            raise RuntimeError(f"reading the PostgreSQL backends' CPU failed: {self._error}")
        return sum(self._last.values())
