"""The solve trigger survives Airflow's serialization unchanged."""

from __future__ import annotations

import importlib

from airflow_llm_router.solver.items import SolveItem
from airflow_llm_router.triggers.solve import SolveTrigger


def test_serialize_round_trip() -> None:
    items = [SolveItem(key="1", prompt="p", request_id="task-1:tok", models=("a", "b"),
                       priority="hot").to_dict()]
    trigger = SolveTrigger(items=items, router_conn_id="r", backend_conn_id="b",
                           deadline=1_900_000_000.5, max_in_flight=7, max_errors=2,
                           retry_backoff_s=0.25, batch_size=4)
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert isinstance(rebuilt, SolveTrigger)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert SolveItem.from_dict(kwargs["items"][0]).models == ("a", "b")
