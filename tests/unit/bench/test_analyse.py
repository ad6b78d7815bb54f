"""The as-is routing bound and the targets' verdicts, on hand-made figures."""

from __future__ import annotations

import pytest

from bench.e2e.analyse import as_is_routing_bound
from bench.e2e.report import at_least_makespan, targets
from bench.e2e.workloads import Workload
from llm_router_devkit.demo.seed import SeedTask
from tests.unit.bench.test_bound import CAPACITY


def task(allowed: tuple[str, ...] | None = None) -> SeedTask:
    return SeedTask("p", "qa", allowed, "bulk")


def test_the_as_is_routing_bound_follows_its_fixed_assignment() -> None:
    # ids 1..4: id 1 -> models[1] = b, id 2 -> a, id 3 -> its list's first model b, id 4 -> a.
    workload = Workload("W", "", (task(), task(), task(("b", "a")), task()))
    bound = as_is_routing_bound(workload, CAPACITY)
    assert bound == {"makespan_s": pytest.approx(2.0), "model": "b", "tasks": 2}  # 2 at 1/s


def metrics(workload: str, design: str, **kw: object) -> dict[str, object]:
    base = {"workload": workload, "design": design, "finished": True, "makespan_s": 10.0,
            "of_bound": 1.0, "rejected_429": 0, "w3": None, "w4": None}
    return {**base, **kw}


def test_a_run_cut_short_is_judged_on_a_lower_bound_of_its_makespan() -> None:
    cut = metrics("W1", "as-is", finished=False, makespan_s=300.0,
                  routing_bound={"makespan_s": 500.0})
    assert at_least_makespan(cut) == 500.0
    assert at_least_makespan(metrics("W1", "as-is", makespan_s=42.0)) == 42.0
    table = targets([cut, metrics("W1", "router", makespan_s=90.0, of_bound=0.5,
                                  rejected_429=3)])
    lines = table.splitlines()
    assert "0.180 at most" in lines[2] and lines[2].endswith("| met |")
    assert lines[3].startswith("| W1: router >= 95 % of the fluid approximation | 50% | **missed**")
    assert lines[4].endswith("| 3 | **missed** |")
