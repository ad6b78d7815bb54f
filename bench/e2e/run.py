"""One benchmark run: a workload through one design on a fresh stack, watched to the end
or to its deadline, and everything measurable collected into one JSON-ready dict.

The run is driven by polling (every ``POLL_S``), never by guessed sleeps: the first call at
the backend starts the workload's clock, scheduled events (W3's quota change, W4's
arrivals) fire when their time has come, a finished DAG run with work left is followed by a
new run at once (the DAG "restarts"), and the run ends when every task is solved or
dead-lettered and nothing more is due, or at the deadline.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.common import warm_up as bench_warm_up
from bench.e2e import collect
from bench.e2e.services import Services, start_services
from bench.e2e.workloads import Workload
from llm_router_devkit.claim_log import install_claim_log, read_claim_log
from llm_router_devkit.demo.fluid_bound import capacities
from llm_router_devkit.demo.router_quotas import router_quotas
from llm_router_devkit.demo.seed import seed_store
from llm_router_devkit.simulator import SimulatorProfile
from llm_router_devkit.stack import PgServer, wait_for

__all__ = ["DESIGNS", "RunOptions", "run_one"]

#: design -> DAG id
DESIGNS = {"as-is": "as_is_baseline", "router": "llm_router_drain"}
POLL_S = 0.25
PROGRESS_EVERY_S = 5.0
#: After the last task is done, how long to wait for the DAG run to record its end.
SETTLE_S = 60.0


@dataclass(frozen=True)
class RunOptions:
    time_scale: float
    seed: int
    deadline_s: dict[str, float]  # per design, from the first trigger
    redis_url: str
    postgres_dsn: str
    parallelism: int = 32
    keep_home: Path | None = None
    #: before a router run, one real call per model through the router (then a window's
    #: wait): the namespace starts with learned estimates, as a deployment's does
    warm: bool = False
    #: before the run, one run of the DAG on an empty store (Airflow has started tasks
    #: before, as a deployment's has: its API server answers its first task starts late)
    warm_airflow: bool = False
    #: extra parameters of the router's drain DAG run (e.g. fan_out, max_in_flight)
    router_params: tuple[tuple[str, int], ...] = ()


def say(message: str) -> None:
    print(message, flush=True)


def _conf(design: str, schema: str, profile: SimulatorProfile,
          router_params: tuple[tuple[str, int], ...] = ()) -> dict[str, Any]:
    if design == "as-is":  # its 30-minute worker kill, at the run's time scale
        return {"store_schema": schema, "worker_timeout_s": 1800.0 / profile.time_scale,
                "models": [m.name for m in profile.models]}
    # the run ends when the backlog does
    return {"store_schema": schema, "linger_s": 0, **dict(router_params)}


def busiest_model(profile: SimulatorProfile, workload: Workload) -> str:
    """The model with the largest sustainable rate R_m for this workload's prompts."""
    cap = capacities(profile, [t.prompt for t in workload.tasks])
    return max(cap.values(), key=lambda c: c.rate).model


def _scaled(limits: dict[str, int | None], factor: float) -> dict[str, int | None]:
    return {k: (None if v is None else max(1, int(v * factor))) for k, v in limits.items()}


#: How long after the router's target is lowered the provider enforces the cut (s).
CUT_GRACE_S = 1.0


def lower_limits(http: httpx.Client, set_quota: Callable[[str, dict[str, Any]], object],
                 profile: SimulatorProfile, workload: Workload, factor: float
                 ) -> tuple[str, dict[str, int | None], dict[str, int | None]]:
    """Lower the busiest model's target in the router (``set_quota``), then, CUT_GRACE_S
    later, its limits at the provider (the simulator behind ``http``): a planned cut, the
    team lowers the target and the provider enforces it from then on. Without the grace
    (or in the other order) the provider refuses the calls admitted under the old target
    that had not reached it yet, which measures that moment, not the router: at W3's cut,
    which comes as the first window's burst returns, 38-88 rpm 429s a run on a 2-core
    machine. The run's yardstick places the cut at the provider's (the caller's stamp,
    taken after this returns): the old limits of the grace are the reference's, not the
    router's, which errs against the router.
    The model, its limits before and after."""
    model = busiest_model(profile, workload)
    before = http.get("/limits").json()[model]
    provider = _scaled(before, factor)
    quota = router_quotas(profile)[model]
    quota.update({k: v for k, v in provider.items() if v is not None})
    set_quota(model, quota)
    time.sleep(CUT_GRACE_S)
    http.put(f"/limits/{model}", json=provider).raise_for_status()
    return model, before, provider


class Watch:
    """The run's clock, its DAG runs and its scheduled events."""

    def __init__(self, svc: Services, workload: Workload, design: str, reset_epoch: float,
                 deadline_s: float, router_params: tuple[tuple[str, int], ...] = ()) -> None:
        self.svc, self.workload, self.design = svc, workload, design
        self.dag_id = DESIGNS[design]
        self.reset_epoch = reset_epoch
        self.deadline = time.monotonic() + deadline_s
        self.http = httpx.Client(base_url=svc.sim.url, timeout=10)
        self.first_call: float | None = None  # seconds after the reset, as first seen
        self.pending_arrivals = sorted(workload.arrivals, key=lambda a: a.at_windows)
        self.change_done = workload.quota_change is None
        self.events: list[dict[str, Any]] = []
        self.runs: list[str] = []
        self.last_progress = 0.0
        self.last_state = "queued"
        self.router_params = router_params

    def now(self) -> float:
        """Seconds since the simulator's stats reset (the timeline's clock)."""
        return time.time() - self.reset_epoch

    def trigger(self) -> None:
        run_id = f"bench_{len(self.runs) + 1}_{uuid.uuid4().hex[:6]}"
        response = self.svc.stack.api(
            "POST", f"/dags/{self.dag_id}/dagRuns",
            json={"dag_run_id": run_id, "logical_date": None,
                  "conf": _conf(self.design, self.svc.schema, self.svc.profile,
                                self.router_params)})
        response.raise_for_status()
        self.runs.append(run_id)
        self.events.append({"at": self.now(), "event": "trigger", "run_id": run_id})
        say(f"[{self.now():7.1f} s] triggered {self.dag_id} run {len(self.runs)}")

    def run_state(self) -> str:
        """The last DAG run's state; the one seen before while the API server is too busy
        to answer in time (on a loaded machine it can take more than the client's 10 s
        as a run starts), so a slow answer delays the poll instead of ending the run."""
        try:
            doc = self.svc.stack.api("GET",
                                     f"/dags/{self.dag_id}/dagRuns/{self.runs[-1]}").json()
        except httpx.TimeoutException:
            say(f"[{self.now():7.1f} s] the API server did not answer in time; polling on")
            return self.last_state
        self.last_state = str(doc.get("state"))
        return self.last_state

    def _window_s(self) -> float:
        return self.svc.profile.scaled_window_s

    def fire_events(self, stats: dict[str, Any]) -> None:
        if self.first_call is None:
            if stats["totals"]["requests"] == 0:
                return
            self.first_call = self.now()
            self.events.append({"at": self.first_call, "event": "first_call_seen"})
        elapsed_w = (self.now() - self.first_call) / self._window_s()
        while self.pending_arrivals and self.pending_arrivals[0].at_windows <= elapsed_w:
            arrival = self.pending_arrivals.pop(0)
            seed_store(self.svc.store, arrival.tasks)
            self.events.append({"at": self.now(), "event": "arrival",
                                "tasks": len(arrival.tasks)})
        change = self.workload.quota_change
        if not self.change_done and change is not None and change.at_windows <= elapsed_w:
            self.change_quota(change.factor)

    def change_quota(self, factor: float) -> None:
        """The busiest model's limits cut by ``factor`` (:func:`lower_limits`)."""
        def set_quota(model: str, quota: dict[str, Any]) -> object:
            # As a team lowers a quota: through the quota store (stored, audited, pushed).
            return self.svc.quotas.put(model, quota, actor="bench.e2e", source="bench")

        model, before, provider = lower_limits(self.http, set_quota, self.svc.profile,
                                               self.workload, factor)
        self.change_done = True
        self.events.append({"at": self.now(), "event": "quota_change", "model": model,
                            "limits": provider, "before": before})
        say(f"[{self.now():7.1f} s] {model}: limits lowered to {provider}")

    def progress(self, counts: dict[str, int], stats: dict[str, Any], state: str) -> None:
        if time.monotonic() - self.last_progress < PROGRESS_EVERY_S:
            return
        self.last_progress = time.monotonic()
        in_flight = sum(m["in_flight"] for m in stats["models"].values())
        say(f"[{self.now():7.1f} s] {self.workload.name}/{self.design} run {len(self.runs)} "
            f"{state:8} | solved {counts['solved']}/{self.workload.size}  pending "
            f"{counts['pending']}  claimed {counts['claimed']}  dead {counts['dead']} | "
            f"backend: in flight {in_flight}, 429s {stats['totals']['rejected_429']}")

    def loop(self) -> str:
        """Poll until done or the deadline; returns ``done`` or ``deadline``."""
        done_at: float | None = None
        while True:
            self.svc.stack.alive()
            stats = self.http.get("/stats").json()
            self.fire_events(stats)
            counts = self.svc.store.counts()
            state = self.run_state()
            self.progress(counts, stats, state)
            left = counts["pending"] + counts["claimed"]
            finished = state in ("success", "failed")
            if left == 0 and not self.pending_arrivals and self.change_done:
                done_at = done_at or time.monotonic()
                if finished or time.monotonic() - done_at > SETTLE_S:
                    return "done"
            if time.monotonic() >= self.deadline:
                say(f"[{self.now():7.1f} s] deadline: {counts['solved']} of "
                    f"{self.workload.size} solved")
                return "deadline"
            if finished and (left or self.pending_arrivals):
                self.trigger()  # the DAG restarts while work is left
            time.sleep(POLL_S)


def _provenance() -> dict[str, Any]:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
        return done.stdout.strip()

    return {"commit": git("rev-parse", "--short", "HEAD"),
            "uncommitted": git("status", "--short", "--", "airflow_llm_router",
                               "example_dags").splitlines()}


def warm_up(svc: Services, workload: Workload) -> None:
    """:func:`bench.common.warm_up` on the run's router and simulator, with the workload's
    first prompt."""
    started = time.monotonic()
    bench_warm_up(svc.router, svc.sim.url, [m.name for m in svc.profile.models],
                  workload.initial[0].prompt, svc.profile.scaled_window_s)
    say(f"warmed up: one call per model ({time.monotonic() - started:.1f} s with a window)")


#: The run ids of :func:`warm_airflow`'s runs begin with this.
WARM_UP_RUN = "warmup_"


def warm_airflow(stack: ExitStack, svc: Services, dag_id: str, timeout_s: float = 600.0
                 ) -> None:
    """One run of ``dag_id`` on an empty store schema of its own, to its end: the API
    server, the executor's workers and the scheduler have started tasks before the
    measured run. The drain finds nothing to do; its schema is dropped afterwards."""
    schema = f"{svc.schema}_warm"
    stack.callback(PgServer.from_dsn(svc.dsn).drop_schema, schema)
    started = time.monotonic()
    svc.stack.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()
    run_id = f"{WARM_UP_RUN}{uuid.uuid4().hex[:6]}"
    svc.stack.api("POST", f"/dags/{dag_id}/dagRuns", json={
        "dag_run_id": run_id, "logical_date": None,
        "conf": {"store_schema": schema, "linger_s": 0}}).raise_for_status()

    def ended() -> bool:
        svc.stack.alive()
        try:
            doc = svc.stack.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}").json()
        except httpx.TimeoutException:
            return False
        return doc.get("state") in ("success", "failed")

    wait_for("the warm-up run to end", ended, timeout_s, 1.0)
    say(f"Airflow warmed up: a run on an empty store took {time.monotonic() - started:.1f} s")


def _measured(airflow: dict[str, Any]) -> dict[str, Any]:
    """Airflow's records without the warm-up run's."""
    return {name: [r for r in rows if not r["run_id"].startswith(WARM_UP_RUN)]
            for name, rows in airflow.items()}


def run_one(workload: Workload, design: str, opts: RunOptions) -> dict[str, Any]:
    """Run ``workload`` through ``design`` on a fresh stack; the raw record of the run."""
    profile = SimulatorProfile.default(time_scale=opts.time_scale, seed=opts.seed)
    dag_id = DESIGNS[design]
    started = time.time()
    with ExitStack() as stack:
        svc = start_services(stack, profile=profile, redis_url=opts.redis_url,
                             dsn=opts.postgres_dsn, dag_id=dag_id,
                             parallelism=opts.parallelism, keep_home=opts.keep_home)
        say(f"stack up in {time.time() - started:.1f} s (simulator {svc.sim.url}, "
            f"window {profile.scaled_window_s:g} s)")
        if opts.warm and design == "router":
            warm_up(svc, workload)
        if opts.warm_airflow and design == "router":
            warm_airflow(stack, svc, dag_id)
        seed_store(svc.store, workload.initial)
        install_claim_log(opts.postgres_dsn, svc.schema)
        svc.stack.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()
        with httpx.Client(base_url=svc.sim.url, timeout=10) as http:
            http.post("/stats/reset").raise_for_status()
        watch = Watch(svc, workload, design, time.time(), opts.deadline_s[design],
                      opts.router_params)
        stack.callback(watch.http.close)
        watch.trigger()
        outcome = watch.loop()
        ended = watch.now()
        backend = collect.backend_records(svc.sim.url, profile)
        rows = collect.store_rows(opts.postgres_dsn, svc.schema, profile)
        claims = read_claim_log(opts.postgres_dsn, svc.schema)
        meta_dsn = PgServer.from_dsn(opts.postgres_dsn).dsn(f"llmr_bench_{svc.suffix}")
        airflow = _measured(collect.airflow_records(meta_dsn, dag_id))
        report = svc.stack.stop()
        say(f"stack stopped in {report.term_s:.1f} s"
            + (f"; SIGKILLed {len(report.killed)}" if report.killed else ""))
    return {
        "workload": workload.name, "description": workload.description, "design": design,
        "dag_id": dag_id, "time_scale": opts.time_scale, "seed": opts.seed,
        "window_s": profile.scaled_window_s, "tasks": workload.size,
        "outcome": outcome, "deadline_s": opts.deadline_s[design],
        "warm": opts.warm and design == "router",
        "warm_airflow": opts.warm_airflow and design == "router",
        "router_params": dict(opts.router_params) if design == "router" else {},
        "started_epoch": started, "reset_epoch": watch.reset_epoch, "ended_s": ended,
        "events": watch.events, "provenance": _provenance(),
        "backend": backend, "rows": rows, "airflow": airflow, "claims": claims,
    }
