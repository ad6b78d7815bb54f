"""The router's slot moves to another node of a 3-master cluster while threads admit and
complete: the migration is done by hand as ``redis-cli --cluster reshard`` does it
(``CLUSTER SETSLOT`` IMPORTING / MIGRATING, ``MIGRATE`` of the keys, ``SETSLOT NODE``):
paced, one key at a time, each ``MIGRATE`` waiting until the traffic has sent more scripts
to the nodes, so scripts arrive at every stage of the move; and at full speed, ten keys
per ``MIGRATE`` as ``redis-cli`` moves them, which shows what a move costs the traffic.

Every key a script touches is declared to it, so Redis refuses a script (``TRYAGAIN``, or
``ASK`` and then ``TRYAGAIN`` on the new node) while the namespace's keys are split or any
is missing, and the client retries it; no script runs on a node that holds only part of
the state. Checked against the test's own log of admissions (client clock, each
admission's send and reply time): no window over its target, no lease id handed out
twice, nothing rejected or failed, and admissions resume once the slot has moved. With
only the prefix declared (the engine before), scripts ran on the new node with half the
state: "unknown model" rejections, lease ids handed out again, windows over target.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import redis
from redis.crc import key_slot

from airflow_llm_router.engine import (
    Admission,
    AdmitRequest,
    AsyncRouterClient,
    ModelQuota,
    RouterClient,
    RouterSettings,
    Wait,
    slots,
)
from airflow_llm_router.engine.decoding import Decision
from airflow_llm_router.exceptions import SlotMigrationError
from llm_router_devkit.redis_tools import LocalCluster
from tests.integration.engine.clusters import SERVER_DIRS, SERVER_IDS, cluster_of, reshard

pytestmark = pytest.mark.timeout(240)

RPM, WINDOW_S = 12, 0.5
QUOTA = {"rpm": RPM, "tpm": 10**9, "max_concurrency": 4, "window_s": WINDOW_S}
MODELS = ("a", "b")
#: the quota "a" is given while its keys move (the same window and rpm)
CHANGED = {**QUOTA, "tpm": 10**9 - 1}
THREADS = 6
#: and coroutines on one asyncio client, in a thread of their own
ASYNC_CALLERS = 3
#: scripts the nodes must have seen between two MIGRATEs (each thread's next attempt)
PROGRESS = 3
#: admissions wanted after the move, before the traffic stops
AFTER = 3 * RPM


@pytest.fixture(scope="module", params=SERVER_DIRS, ids=SERVER_IDS)
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_of(request.param) as c:
        yield c


@dataclass
class Traffic:
    """Threads and coroutines admitting (two in three name a model, the others take any)
and completing at once."""

    url: str
    settings: RouterSettings
    #: (model, lease id, sent, answered): monotonic seconds on the test's clock
    log: list[tuple[str, str, float, float]] = field(default_factory=list)
    #: when each decision (admission or wait) was answered
    answered: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: repeats sent by redis-py's asyncio cluster client (see _async_once)
    redis_py: Counter[str] = field(default_factory=Counter)
    moved: threading.Event = field(default_factory=threading.Event)
    after: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def run(self, k: int) -> None:
        """A sync caller: ``k`` picks whether it names a model."""
        router = RouterClient.from_url(self.url, self.settings)
        try:
            while not self.stop.is_set():
                self.stop.wait(self._once(router, _models(k)))
        finally:
            router.close()

    def run_async(self, callers: int) -> None:
        """``callers`` coroutines on one asyncio client (their calls merged)."""
        asyncio.run(self._async_callers(callers))

    async def _async_callers(self, callers: int) -> None:
        router = AsyncRouterClient.from_url(self.url, self.settings)

        async def caller(k: int) -> None:
            while not self.stop.is_set():
                await asyncio.sleep(await self._async_once(router, _models(k)))

        try:
            await asyncio.gather(*(caller(k) for k in range(callers)))
        finally:
            await router.aclose()

    def _once(self, router: RouterClient, models: tuple[str, ...] | None) -> float:
        sent = time.monotonic()
        try:
            got = router.admit_many([AdmitRequest(1, models=models)])[0]
            answered = time.monotonic()
            if isinstance(got, Admission):
                assert router.complete(got.lease_id, 1, 1) == "released"
        except Exception as err:  # every failure is one of the test's findings
            return self._note(f"{type(err).__name__}: {err}")
        return self._record(got, sent, answered)

    async def _async_once(self, router: AsyncRouterClient,
                          models: tuple[str, ...] | None) -> float:
        """As :meth:`_once`. A connection that redis-py's asyncio cluster client closes
        under a call while it refreshes its slot map is the client's to retry (a finding
        here); a complete that redis-py sent again after a connection error is counted
        apart (the engine answers the repeat ``settled``)."""
        sent = time.monotonic()
        try:
            got = (await router.admit_many([AdmitRequest(1, models=models)]))[0]
            answered = time.monotonic()
            if isinstance(got, Admission):
                status = await router.complete(got.lease_id, 1, 1)
                # a complete that redis-py sent again after a connection error: the engine
                # answers a repeat so
                if status == "settled":
                    self.redis_py["complete sent twice"] += 1
                else:
                    assert status == "released"
        except Exception as err:  # every failure is one of the test's findings
            return self._note(f"async {type(err).__name__}: {err}")
        return self._record(got, sent, answered)

    def _record(self, got: Decision, sent: float, answered: float) -> float:
        """Log a decision; returns how long its caller waits before the next."""
        self.answered.append(answered)
        if isinstance(got, Admission):
            with self.changed:
                self.log.append((got.model, got.lease_id, sent, answered))
                self.after += self.moved.is_set()
                self.changed.notify_all()
            return 0
        if isinstance(got, Wait):
            return got.retry_after_ms / 1000
        return self._note(f"rejected: {got.reason} {got.detail}")

    def _note(self, problem: str) -> float:
        with self.changed:
            self.problems.append(problem)
        return 0.05


    def wait_for(self, check: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
        with self.changed:
            assert self.changed.wait_for(check, timeout_s), f"{what}: not within {timeout_s} s"


def _models(k: int) -> tuple[str, ...] | None:
    """Two callers in three name a model, the third may take any."""
    return (MODELS[k % 2],) if k % 3 else None


def _set_quota(url: str, settings: RouterSettings, traffic: Traffic) -> None:
    router = RouterClient.from_url(url, settings)
    try:
        router.set_quota("a", CHANGED)
    except Exception as err:
        traffic._note(f"set_quota during the move: {type(err).__name__}: {err}")
    finally:
        router.close()


def _progress(nodes: list[redis.Redis]) -> int:
    """Scripts the nodes have run or refused: EVALSHA calls and every error reply
    (TRYAGAIN, ASK, MOVED) they counted."""
    total = 0
    for node in nodes:
        total += int(node.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
        total += sum(int(v["count"]) for v in node.info("errorstats").values())
    return total


def _await_progress(nodes: list[redis.Redis], since: int, traffic: Traffic) -> None:
    deadline = time.monotonic() + 30
    while _progress(nodes) < since + PROGRESS:
        assert not traffic.stop.is_set()
        assert time.monotonic() < deadline, "the traffic sent no script for 30 s"
        time.sleep(0.002)  # a poll of the servers' counters: nothing to wait on


def _reshard(cluster: LocalCluster, slot: int, traffic: Traffic, paced: bool,
             mid_move: Callable[[], None]) -> tuple[int, float, float]:
    """Move ``slot`` (paced: key by key, each after more scripts reached the nodes; else
    10 keys per MIGRATE), calling ``mid_move`` after the first MIGRATE (clusters.reshard)."""
    if not paced:
        return reshard(cluster, slot, mid_move=mid_move)

    def pace(nodes: list[redis.Redis]) -> Callable[[], None]:
        since = _progress(nodes)
        return lambda: _await_progress(nodes, since, traffic)

    return reshard(cluster, slot, per_migrate=1, mid_move=mid_move, pace=pace)


def _over_target(log: list[tuple[str, str, float, float]]) -> list[str]:
    """Windows that certainly held more than RPM admissions of a model: more than RPM
    admissions sent and answered within less than one window (each was decided between its
    send and its answer, so they all fell in a span shorter than the window)."""
    found = []
    for model in MODELS:
        calls = sorted((s, r) for m, _, s, r in log if m == model)
        for j, (start, _) in enumerate(calls):
            inside = [r for s, r in calls[j:] if s < start + WINDOW_S and r < start + WINDOW_S]
            if len(inside) > RPM:
                found.append(f"{model}: {len(inside)} admitted within {WINDOW_S} s from "
                             f"{start:.3f}")
    return found


@pytest.mark.parametrize("paced", [True, False], ids=["paced", "full-speed"])
def test_resharding_the_routers_slot_mid_traffic(cluster: LocalCluster, paced: bool) -> None:
    settings = RouterSettings(namespace=f"reshard-{uuid.uuid4().hex[:8]}", guard_ms=20)
    setup = RouterClient.from_url(cluster.url, settings)
    for model in MODELS:
        setup.set_quota(model, QUOTA)
    slot = key_slot(setup.core.keys.prefix.encode())
    setup.close()
    traffic = Traffic(cluster.url, settings)
    threads = [threading.Thread(target=traffic.run, args=(k,)) for k in range(THREADS)]
    threads.append(threading.Thread(target=traffic.run_async, args=(ASYNC_CALLERS,)))
    for t in threads:
        t.start()
    try:
        traffic.wait_for(lambda: len(traffic.log) >= 2 * RPM, "admissions before the move")
        # a quota change while the keys are split (the quota hash on either node)
        change = threading.Thread(target=_set_quota, args=(cluster.url, settings, traffic))
        moved, started, ended = _reshard(cluster, slot, traffic, paced, change.start)
        traffic.moved.set()
        change.join(60)
        traffic.wait_for(lambda: traffic.after >= AFTER or len(traffic.problems) > 20,
                         "admissions after the move")
    finally:
        traffic.stop.set()
        for t in threads:
            t.join(30)
    assert moved >= 8, f"only {moved} keys moved: the namespace's state was not in the slot"
    leases = [lid for _, lid, _, _ in traffic.log]
    over = _over_target(traffic.log)
    findings = {
        "problems": f"{len(traffic.problems)}: {sorted(set(traffic.problems))[:6]}",
        "lease ids handed out twice": len(leases) - len(set(leases)),
        "windows over target": f"{len(over)}: {over[:3]}",
        "admissions after the move": traffic.after,
        "redis-py asyncio cluster client": dict(traffic.redis_py),
    }
    during = sum(started < s and r < ended for _, _, s, r in traffic.log)
    resumed = min(r for r in traffic.answered if r > ended) - ended
    print(f"moved {moved} keys in {(ended - started) * 1000:.0f} ms; admissions answered "
          f"during the move {during}; the first decision after it {resumed * 1000:.0f} ms "
          "after; "
          f"{len(leases)} admissions; {findings}")
    assert (traffic.problems, len(set(leases)), over) == ([], len(leases), []), findings
    assert traffic.after >= AFTER, findings
    check = RouterClient.from_url(cluster.url, settings)
    try:  # the change made during the move is the quota in force after it
        assert check.get_quota("a") == ModelQuota.parse(CHANGED)
    finally:
        check.close()


def test_a_migration_left_half_done_ends_in_a_clear_error(
        cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slot left MIGRATING (nothing moved, the move never finished): the client retries the
    refused script for MIGRATION_WAIT_S, then raises SlotMigrationError, having applied
    nothing; once the slot is stable again, admission goes on."""
    monkeypatch.setattr(slots, "MIGRATION_WAIT_S", 1.0)
    settings = RouterSettings(namespace=f"stuck-{uuid.uuid4().hex[:8]}", guard_ms=20)
    router = RouterClient.from_url(cluster.url, settings)
    nodes = [redis.Redis(port=n.port) for n in cluster.nodes]
    try:
        router.set_quota("a", QUOTA)
        slot = key_slot(router.core.keys.prefix.encode())
        ids = [n.execute_command("CLUSTER", "MYID").decode() for n in nodes]
        owner = next(i for i, n in enumerate(nodes)
                     if n.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) > 0)
        other = (owner + 1) % len(nodes)
        nodes[other].execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[owner])
        nodes[owner].execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[other])
        started = time.monotonic()
        with pytest.raises(SlotMigrationError, match="being migrated"):
            router.admit(1, request_id="stuck-1")
        assert time.monotonic() - started >= 1.0
        for node in (nodes[owner], nodes[other]):
            node.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
        assert router.stats().models["a"].counters["admitted"] == 0  # nothing applied
        assert isinstance(router.admit(1, request_id="stuck-1"), Admission)
    finally:
        router.close()
        for n in nodes:
            n.close()
