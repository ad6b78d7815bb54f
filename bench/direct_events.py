"""The workload's events during a ``bench.direct`` run: W3's cut of limits and W4's
arrivals, each at its time after the first call the backend received.

They fire from a process of their own. From a thread of the drains' process they waited
for the interpreter lock behind the drains' event loop, busiest exactly when a window
turns: measured on W3, the cut due 20.0 s after the first call had taken effect only at
21.6-21.9 s, and calls admitted under the old target in between met the lowered provider
(38 and 64 rpm 429s in two runs). ``bench.e2e`` fires them from its own process as well.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import queue
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.e2e.workloads import Workload
    from llm_router_devkit.simulator import SimulatorProfile

__all__ = ["EVENT_POLL_S", "EventsSpec", "WorkloadEvents"]

#: How often the events' process looks for the first call at the backend (s).
EVENT_POLL_S = 0.02
#: How long ``stop`` waits for the process to end before it is killed (s).
STOP_WAIT_S = 15.0


@dataclass(frozen=True)
class EventsSpec:
    """What the events' process needs (all of it picklable): the simulator's URL, the
    workload and the simulator's profile, and the run's PostgreSQL schema and Redis (its
    URL and namespace), where its quota store and task store are."""

    url: str
    workload: Workload
    profile: SimulatorProfile
    dsn: str
    schema: str
    redis_url: str
    namespace: str


class WorkloadEvents:
    """The workload's events at their time after the first call the backend received, as
    ``bench.e2e`` fires them: W3's cut of the busiest model's limits (``lower_limits``,
    through the quota store), W4's arrivals (into the task store, while the drains still
    run: their bulk backlog outlasts the last arrival). After :meth:`stop`, each fired
    event is in ``fired`` (seconds after the first call; a quota change also with
    ``change_s``, when the provider's limits had been lowered, from the start of the first
    call's timeline bucket once the run adds it: never earlier than it was, as the
    yardstick needs); one that fails is recorded there too, and the run goes on without it
    rather than hiding that it did."""

    def __init__(self, spec: EventsSpec) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._stop_event, self._ready = ctx.Event(), ctx.Event()
        self._results = ctx.Queue()
        self._process = ctx.Process(target=_fire, name="bench-direct-events", daemon=True,
                                    args=(spec, self._stop_event, self._ready, self._results))
        self.fired: list[dict[str, Any]] = []
        self._collected = False

    def start(self) -> None:
        """Start the process; return once it looks for the first call (its imports and
        connections done: the drains must not send before it watches)."""
        self._process.start()
        deadline = time.monotonic() + STOP_WAIT_S * 4
        while not self._ready.wait(0.1):
            if not self._process.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the workload's events did not start: {self.fired}")

    def wait(self, timeout_s: float) -> None:
        """Wait until every event has fired (the process has put its record)."""
        self._collect(timeout_s)

    def stop(self) -> None:
        """Stop firing; collect what was fired (once: later calls keep ``fired``)."""
        self._stop_event.set()
        self._collect(STOP_WAIT_S)

    def _collect(self, timeout_s: float) -> None:
        if self._process.pid is None or self._collected:
            return
        deadline = time.monotonic() + timeout_s
        while True:  # read before joining: a child blocks on exit until its queue is read
            try:
                self.fired = self._results.get(timeout=0.2)
                break
            except queue.Empty:
                if not self._process.is_alive():  # ended: its record, if any, is in the pipe
                    try:
                        self.fired = self._results.get(timeout=1.0)
                        break
                    except queue.Empty:
                        pass
                    self.fired = [{"at_s": None, "event": "events",
                                   "error": f"the events' process ended with exit code "
                                            f"{self._process.exitcode} and no record"}]
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the workload's events were not all fired within "
                                       f"{timeout_s} s") from None
        self._collected = True
        self._process.join(timeout=STOP_WAIT_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


def _fire(spec: EventsSpec, stop: multiprocessing.synchronize.Event,
          ready: multiprocessing.synchronize.Event,
          results: multiprocessing.Queue[list[dict[str, Any]]]) -> None:
    """The events' process: fire each event at its time, then put the record."""
    fired: list[dict[str, Any]] = []
    try:
        _fire_all(spec, stop, ready, fired)
    except Exception as err:  # recorded with the run's figures, not lost with the process
        fired.append({"at_s": None, "event": "events", "error": repr(err)})
    finally:
        results.put(fired)


def _fire_all(spec: EventsSpec, stop: multiprocessing.synchronize.Event,
              ready: multiprocessing.synchronize.Event, fired: list[dict[str, Any]]) -> None:
    import httpx

    from airflow_llm_router.engine import RouterClient, RouterSettings
    from airflow_llm_router.quotas import QuotaStore
    from airflow_llm_router.store import TaskStore
    from bench.e2e.run import lower_limits
    from llm_router_devkit.demo.seed import seed_store

    profile, workload = spec.profile, spec.workload
    todo: list[tuple[float, str, Any]] = [(a.at_windows, "arrival", a.tasks)
                                          for a in workload.arrivals]
    if workload.quota_change is not None:
        todo.append((workload.quota_change.at_windows, "quota_change",
                     workload.quota_change.factor))
    if not todo:
        ready.set()
        return
    todo.sort(key=lambda e: e[0])
    router = RouterClient.from_url(spec.redis_url, RouterSettings(namespace=spec.namespace))
    quotas = QuotaStore(spec.dsn, router, schema=spec.schema)
    store = TaskStore(spec.dsn, schema=spec.schema)
    window = profile.scaled_window_s
    try:
        with httpx.Client(base_url=spec.url, timeout=30) as http:
            http.get("/health").raise_for_status()
            ready.set()
            while http.get("/stats").json()["totals"]["requests"] == 0:
                if stop.wait(EVENT_POLL_S):
                    return
            first = time.monotonic()
            for at_windows, kind, what in todo:
                if stop.wait(max(0.0, first + at_windows * window - time.monotonic())):
                    return
                at = round(time.monotonic() - first, 2)
                try:
                    if kind == "arrival":
                        seed_store(store, what)
                        fired.append({"at_s": at, "event": kind, "tasks": len(what)})
                    else:
                        model, _, limits = lower_limits(
                            http, lambda m, q: quotas.put(m, q, actor="bench.direct"),
                            profile, workload, what)
                        fired.append({"at_s": at, "event": kind, "model": model,
                                      "limits": limits, "done_wall": time.time()})
                except Exception as err:  # recorded with the run's figures
                    fired.append({"at_s": at, "event": kind, "error": repr(err)})
    finally:
        store.close()
        router.close()
