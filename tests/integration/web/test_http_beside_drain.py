"""Callers outside Airflow and a drain share the quotas (``bench/http_admission.py``, small):
plain httpx clients drive /schedule -> the simulator -> /complete through the standalone
API while a drain solves a backlog on the same models, and the backend, which refuses
whatever would go over a limit, is never asked to."""

from __future__ import annotations

import pytest

from bench.http_admission import _parser, run

pytestmark = [pytest.mark.timeout(600)]


def test_outside_callers_and_a_drain_never_take_a_window_over_target() -> None:
    # callers that do not report their hop, and the least guard: the API's hop allowance
    # alone covers the HTTP hop (here one that covers it on a loaded machine)
    opts = _parser().parse_args(["--clients", "8", "--calls", "150", "--backlog", "150",
                                 "--time-scale", "30", "--http-hop-ms", "500"])
    result = run(opts, guard_ms=50, raw_seconds=0, hop=False)
    assert result["http_admitted"] == 150 and result["drain_solved"] == 150, result
    assert result["drain_status"] == "done"
    assert result["backend_429"] == 0, result
    for name, model in result["models"].items():
        assert not model["over_target"], (name, model)
        assert model["rejected_429"] == 0
    # both kinds of caller went through the same models, and the backend saw every call
    # (and each hedge of a late drain call: one call more)
    assert sum(m["accepted"] for m in result["models"].values()) == 300 + result["drain_hedged"]
    assert result["http_backend_errors"] == 0
