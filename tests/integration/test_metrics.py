"""Router metrics reach a StatsD server (a UDP socket this test listens on) through
Airflow's own Stats: counters from a real solve, gauges from the engine's stats."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from airflow_llm_router import metrics
from airflow_llm_router.engine import RouterClient
from airflow_llm_router.solver.items import SolveItem
from airflow_llm_router.triggers.solve import SolveTrigger
from tests.integration.backends import serve_backend, set_quotas_from, small_profile


class StatsdListener:
    """A StatsD server: collects the lines sent to it."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = int(self.sock.getsockname()[1])
        self.lines: list[str] = []

    def collect(self) -> list[str]:
        while True:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return self.lines
            self.lines.extend(data.decode().splitlines())

    def wait_for(self, prefix: str, timeout_s: float = 5.0) -> list[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [line for line in self.collect() if line.startswith(prefix)]
            if found:
                return found
        raise AssertionError(f"no {prefix!r} among {self.lines[-20:]}")


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[StatsdListener]:
    from airflow.configuration import conf

    listener = StatsdListener()
    settings = {"statsd_on": "True", "statsd_host": "127.0.0.1",
                "statsd_port": str(listener.port), "statsd_prefix": "airflow"}
    before = {k: conf.get("metrics", k, fallback=None) for k in settings}
    for key, value in settings.items():
        conf.set("metrics", key, value)
    monkeypatch.setattr(metrics, "_initialized", False)
    yield listener
    for key, value in before.items():
        if value is not None:
            conf.set("metrics", key, value)
    metrics._initialized = False  # the next user re-reads [metrics]
    listener.sock.close()


async def test_solving_counts_admissions_waits_and_429s(
        statsd: StatsdListener, monkeypatch: pytest.MonkeyPatch, namespace: str,
        pg_dsn: str, router: RouterClient) -> None:
    profile = small_profile(time_scale=60)  # one-second windows
    with serve_backend(profile, monkeypatch, namespace, pg_dsn):
        set_quotas_from(router, profile)
        # m0's router target above its provider limit (5 per window): the backend says 429
        router.set_quota("m0", {"rpm": 1000, "tpm": 10**6, "max_concurrency": 4,
                                "window_s": 1.0})
        items = [SolveItem(key=str(i), prompt=f"question {i}", request_id=f"mx-{i}",
                           models=("m0",)).to_dict() for i in range(12)]
        trigger = SolveTrigger(items=items, router_conn_id="llm_router_default",
                               backend_conn_id="models_backend_default",
                               deadline=time.time() + 30,
                               settings={"max_in_flight": 12, "backoff_s": 0.05})
        event = (await anext(trigger.run())).payload
    assert event["status"] == "done"
    admitted = statsd.wait_for("airflow.llm_router.admitted.m0:")
    assert all(line.endswith("|c") for line in admitted)
    assert len(admitted) >= 12  # one per admission, retries included
    assert statsd.wait_for("airflow.llm_router.admission_wait.m0:")[0].endswith("|ms")
    assert statsd.wait_for("airflow.llm_router.rate_limited.m0:")
    waits = statsd.wait_for("airflow.llm_router.waits.concurrency:")
    # counted once per admission round: the first round told the 8 beyond m0's 4 slots
    counts = [int(line.split(":")[1].split("|")[0]) for line in waits]
    assert max(counts) >= 8, waits


def test_usage_gauges_follow_the_window(statsd: StatsdListener, router: RouterClient) -> None:
    router.set_quota("gpt/small", {"rpm": 10, "tpm": 1000, "max_concurrency": 5})
    for _ in range(3):
        router.admit(100)
    metrics.usage(router.stats())
    assert statsd.wait_for("airflow.llm_router.in_flight.gpt_small:") == [
        "airflow.llm_router.in_flight.gpt_small:3|g"]
    assert statsd.wait_for("airflow.llm_router.rpm_used_pct.gpt_small:") == [
        "airflow.llm_router.rpm_used_pct.gpt_small:30.0|g"]
    assert statsd.wait_for("airflow.llm_router.window_tokens.gpt_small:") == [
        "airflow.llm_router.window_tokens.gpt_small:300|g"]
    assert statsd.wait_for("airflow.llm_router.guard_ms.gpt_small:") == [
        "airflow.llm_router.guard_ms.gpt_small:600|g"]  # 1 % of the 60 s window
