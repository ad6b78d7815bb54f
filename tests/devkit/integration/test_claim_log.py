"""The harness's claim log on a real task store: one row per claiming statement."""

from __future__ import annotations

import time
from typing import Any

from llm_router_devkit.claim_log import first_claim_epoch, install_claim_log, read_claim_log


def test_each_claim_statement_is_logged_with_its_solver_and_count(
        store: Any, pg_dsn: str, pg_schema: str) -> None:
    store.enqueue([f"prompt {i}" for i in range(5)])
    install_claim_log(pg_dsn, pg_schema)
    assert read_claim_log(pg_dsn, pg_schema) == []
    assert first_claim_epoch([]) is None
    before = time.time()
    assert len(store.claim(3, worker_id="lead", claim_ttl_s=30)) == 3
    assert len(store.claim(3, worker_id="solve-1", claim_ttl_s=30)) == 2
    after = time.time()
    claims = read_claim_log(pg_dsn, pg_schema)
    assert [(c["worker"], c["n"]) for c in claims] == [("lead", 3), ("solve-1", 2)]
    # the database's clock on this machine: within the client's calls, give or take a ms
    assert before - 0.01 <= claims[0]["at"] <= claims[1]["at"] <= after + 0.01
    assert first_claim_epoch(claims) == claims[0]["at"]
    assert first_claim_epoch(list(reversed(claims))) == claims[0]["at"]
