"""A drain whose router is a Sentinel-managed master, across a failover: no window over
target at the backend, no 429, and a pause of about one window.

A master, its replica and a sentinel on loopback ports (``LocalSentinel``), a whole drain
(``drain_across``) and mid-drain either ``SENTINEL FAILOVER`` (the old master goes on
taking the drain's admissions until it is demoted, seconds later) or a SIGKILL of the
master (an outage until the replica is promoted). Without the hold on a master change
(``engine/failover.py``) a failover sent a window's worth again at once (measured 18 429s
in a 30-call window).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import pytest

from airflow_llm_router.store import TaskStore
from llm_router_devkit.redis_tools import LocalSentinel
from tests.integration.engine.test_failover_hold import FAULTS
from tests.integration.solver.drain_across import GUARD_MS, WINDOW_S, drain_across

pytestmark = pytest.mark.timeout(180)

#: from the failover's end to the first answer after it: the reconnection (the outage's
#: backoff, up to 2 s), the hold (one window + guard) and a call's round trip
MAX_PAUSE_S = WINDOW_S + GUARD_MS / 1000 + 2.5


@pytest.fixture
def sentinel() -> Iterator[LocalSentinel]:
    with LocalSentinel() as s:
        yield s


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_drain_across_a_failover_keeps_every_window(
    monkeypatch: pytest.MonkeyPatch, namespace: str, pg_dsn: str, pg_schema: str,
    store: TaskStore, sentinel: LocalSentinel, fault: str,
) -> None:
    assert sentinel.sentinel is not None
    drained = await drain_across(
        partial(FAULTS[fault], sentinel), url=sentinel.url,
        conn={"host": "127.0.0.1", "port": sentinel.sentinel.port,
              "extra": {"sentinel_master": sentinel.master_name}},
        monkeypatch=monkeypatch, namespace=namespace, pg_dsn=pg_dsn, pg_schema=pg_schema,
        store=store)
    print(drained.report(fault))
    drained.check(store, MAX_PAUSE_S)
