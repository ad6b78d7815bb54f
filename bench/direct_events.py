"""The workload's events during a ``bench.direct`` run: W3's cut of limits and W4's
arrivals, each at its time after the first call the backend received."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["EVENT_POLL_S", "WorkloadEvents"]

#: How often the events' thread looks for the first call at the backend (s).
EVENT_POLL_S = 0.02


class WorkloadEvents(threading.Thread):
    """The workload's events at their time after the first call the backend received, as
    ``bench.e2e`` fires them: W3's cut of the busiest model's limits (``lower_limits``,
    through the quota store), W4's arrivals (into the task store, while the drains still
    run: their bulk backlog outlasts the last arrival). Each fired event is in ``fired``
    (seconds after the first call; a quota change also with ``change_s``, when the
    provider's limits had been lowered, from the start of the first call's timeline bucket:
    never earlier than it was, as the yardstick needs); one that fails is recorded there
    too, and the run goes on without it rather than hiding that it did."""

    def __init__(self, url: str, workload: Any, profile: Any,
                 set_quota: Callable[[str, dict[str, Any]], object],
                 enqueue: Callable[[Any], object]) -> None:
        super().__init__(name="bench-direct-events", daemon=True)
        self.url, self.workload, self.profile = url, workload, profile
        self.set_quota, self.enqueue = set_quota, enqueue
        self.fired: list[dict[str, Any]] = []
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=10)

    def run(self) -> None:
        import httpx

        from bench.e2e.run import lower_limits

        todo: list[tuple[float, str, Any]] = [(a.at_windows, "arrival", a.tasks)
                                              for a in self.workload.arrivals]
        if self.workload.quota_change is not None:
            change = self.workload.quota_change
            todo.append((change.at_windows, "quota_change", change.factor))
        if not todo:
            return
        todo.sort(key=lambda e: e[0])
        window = self.profile.scaled_window_s
        with httpx.Client(base_url=self.url, timeout=30) as http:
            while http.get("/stats").json()["totals"]["requests"] == 0:
                if self._stop_event.wait(EVENT_POLL_S):
                    return
            first = time.monotonic()
            for at_windows, kind, what in todo:
                if self._stop_event.wait(max(0.0, first + at_windows * window
                                             - time.monotonic())):
                    return
                at = round(time.monotonic() - first, 2)
                try:
                    if kind == "arrival":
                        self.enqueue(what)
                        self.fired.append({"at_s": at, "event": kind, "tasks": len(what)})
                    else:
                        model, _, limits = lower_limits(http, self.set_quota, self.profile,
                                                        self.workload, what)
                        self.fired.append({"at_s": at, "event": kind, "model": model,
                                           "limits": limits, "done_wall": time.time()})
                except Exception as err:  # recorded with the run's figures
                    self.fired.append({"at_s": at, "event": kind, "error": repr(err)})
