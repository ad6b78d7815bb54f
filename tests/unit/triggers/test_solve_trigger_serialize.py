"""Every trigger of the provider survives Airflow's serialization unchanged."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from airflow_llm_router.solver.items import SolveItem
from airflow_llm_router.triggers.backlog import BacklogArrivalTrigger, BackpressureTrigger
from airflow_llm_router.triggers.base import SerializedArguments
from airflow_llm_router.triggers.solve import DrainTrigger, SolveTrigger

ITEMS = [SolveItem(key="1", prompt="p", request_id="task-1:tok", models=("a", "b"),
                   priority="hot").to_dict()]

TRIGGERS: list[SerializedArguments] = [
    SolveTrigger(items=ITEMS, router_conn_id="r", backend_conn_id="b",
                 deadline=1_900_000_000.5,
                 settings={"max_in_flight": 7, "max_errors": 2, "backoff_s": 0.25,
                           "batch_size": 4}),
    DrainTrigger(store={"postgres_conn_id": "pg", "schema": "s", "table": "t"},
                 worker_id="w", router_conn_id="r", backend_conn_id="b", deadline=1.5,
                 settings={"claim_batch": 9, "linger_s": 2.5}, state={"started": 1.0},
                 until_empty=True, hedge_deadline=2.5),
    BacklogArrivalTrigger(postgres_conn_id="pg", schema="s", table="t", min_interval_s=3,
                          poll_interval_s=7, backlog_cap=9),
    BackpressureTrigger(router_conn_id="r", postgres_conn_id="pg", schema="s", table="t",
                        per_solver_in_flight=5, max_solvers=3, input_tokens_per_call=11,
                        poll_interval_s=2, backlog_cap=8),
]


def _rebuild(classpath: str, kwargs: dict[str, Any]) -> Any:
    module, _, name = classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)(**kwargs)


@pytest.mark.parametrize("trigger", TRIGGERS, ids=lambda t: type(t).__name__)
def test_serialize_round_trip(trigger: SerializedArguments) -> None:
    classpath, kwargs = trigger.serialize()
    assert set(kwargs) == set(type(trigger).argument_names())  # every argument, no more
    rebuilt = _rebuild(classpath, kwargs)
    assert type(rebuilt) is type(trigger)
    assert rebuilt.serialize() == (classpath, kwargs)


def test_settings_travel_whole_with_their_defaults() -> None:
    """The trigger carries every setting, so the triggerer uses the DAG's values and the
    settings' own defaults, never defaults of its own."""
    _, kwargs = TRIGGERS[1].serialize()
    assert kwargs["settings"]["claim_batch"] == 9 and kwargs["settings"]["linger_s"] == 2.5
    assert kwargs["settings"]["max_in_flight"] == 100  # DrainSettings' default
    assert SolveItem.from_dict(TRIGGERS[0].serialize()[1]["items"][0]).models == ("a", "b")


def test_a_trigger_refuses_unknown_settings() -> None:
    with pytest.raises(ValueError, match=r"settings\.chunk_size: not a setting"):
        DrainTrigger(store={"postgres_conn_id": "pg", "schema": "s", "table": "t"},
                     worker_id="w", router_conn_id="r", backend_conn_id="b", deadline=1.5,
                     settings={"chunk_size": 9})
