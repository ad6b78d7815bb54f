"""A progress line every few seconds while the DAG runs: counts only, never prompt text."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, TextIO, TypeVar

__all__ = ["Heartbeat", "ProgressPrinter", "progress_line"]


def progress_line(
    elapsed_s: float,
    total: int,
    counts: Mapping[str, int] | None,
    router: Mapping[str, int] | None,
    backend: Mapping[str, int] | None,
) -> str:
    """One line; a source that could not be read shows ``?``.

    :param counts: task store statuses (``pending``, ``claimed``, ``solved``, ``dead``).
    :param router: ``admitted`` (since the start) and ``waiting`` (now).
    :param backend: ``in_flight`` (now), ``rejected_429`` and ``errors`` (the 500s it
        answered) since the start.
    """

    def get(doc: Mapping[str, int] | None, key: str) -> str:
        return "?" if doc is None else str(doc.get(key, 0))

    return (
        f"[{elapsed_s:6.1f} s] solved {get(counts, 'solved')}/{total}  "
        f"pending {get(counts, 'pending')}  claimed {get(counts, 'claimed')}  "
        f"dead {get(counts, 'dead')} | router: admitted {get(router, 'admitted')}, "
        f"waiting {get(router, 'waiting')} | backend: in flight {get(backend, 'in_flight')}, "
        f"429s {get(backend, 'rejected_429')}, 500s {get(backend, 'errors')}"
    )


def _safe(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:  # a probe must never break the run; the line shows "?"
        return None


_T = TypeVar("_T", bound="_Ticker")


class _Ticker:
    """Calls :meth:`_tick` every ``interval_s`` on a daemon thread, from :meth:`start` (or
    entering the ``with``) until :meth:`stop` (or leaving it)."""

    _thread_name = "llmr-demo-ticker"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0.0

    def _tick(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._tick()

    def start(self: _T) -> _T:
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name=self._thread_name,
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread; no tick comes after this returns."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=10)
        self._thread = None

    def __enter__(self: _T) -> _T:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ProgressPrinter(_Ticker):
    """Prints :func:`progress_line` every ``interval_s`` on a daemon thread until stopped.

    Each reader is called on that thread (give it its own connections) and returns the
    mapping :func:`progress_line` expects; an exception shows as ``?``.
    """

    _thread_name = "llmr-demo-progress"

    def __init__(
        self,
        total: int,
        *,
        counts: Callable[[], Mapping[str, int]],
        router: Callable[[], Mapping[str, int]],
        backend: Callable[[], Mapping[str, int]],
        interval_s: float = 2.0,
        out: TextIO | None = None,
    ) -> None:
        super().__init__(interval_s)
        self.total = total
        self._readers = (counts, router, backend)
        self._out = out

    def _tick(self) -> None:
        counts, router, backend = (_safe(read) for read in self._readers)
        line = progress_line(time.monotonic() - self._start, self.total, counts, router, backend)
        print(line, file=self._out or sys.stdout, flush=True)

    def stop(self) -> None:
        """Stop and print one last line."""
        if self._thread is None:
            return
        super().stop()
        self._tick()


class Heartbeat(_Ticker):
    """Says each step of a long computation as it starts (``[2/5] ...``), and every
    ``interval_s`` on a daemon thread that the step is still running, with the seconds
    since the computation began: a long step is never a silent one."""

    _thread_name = "llmr-demo-heartbeat"

    def __init__(self, steps: int, interval_s: float, say: Callable[[str], None]) -> None:
        super().__init__(interval_s)
        self.steps = steps
        self._say = say
        self._done = 0
        self._what = ""
        self._lock = threading.Lock()

    def _elapsed(self) -> str:
        return f"{time.monotonic() - self._start:.0f} s"

    def step(self, what: str) -> None:
        """The next step starts: ``what`` it computes."""
        with self._lock:
            self._done += 1
            self._what = what
            self._say(f"  [{self._done}/{self.steps}] {what} ({self._elapsed()} so far)")

    def _tick(self) -> None:
        with self._lock:
            self._say(f"  [{self._done}/{self.steps}] still computing {self._what} "
                      f"({self._elapsed()} so far)")
