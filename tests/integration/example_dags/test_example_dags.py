"""The example DAGs parse without services and have the expected shape."""

from __future__ import annotations

import importlib.util
from datetime import timedelta
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "example_dags"


@pytest.fixture(scope="module")
def bag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(EXAMPLES), safe_mode=False)


def test_every_file_imports(bag) -> None:
    assert bag.import_errors == {}
    assert set(bag.dags) == {"as_is_baseline", "llm_router_common_ai", "llm_router_drain",
                             "llm_router_single_prompt"}


def test_drain_maps_the_solver_over_the_sensors_settings(bag) -> None:
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    from airflow_llm_router.operators.solve import SolveTaskOperator

    dag = bag.dags["llm_router_drain"]
    # started by arrivals: scheduled on the backlog asset, watched by the arrival trigger
    assert type(dag.timetable).__name__ == "AssetTriggeredTimetable"
    (asset,) = dag.timetable.asset_condition.objects  # type: ignore[attr-defined]
    (watcher,) = asset.watchers
    assert type(watcher.trigger).__name__ == "BacklogArrivalTrigger"
    assert watcher.trigger.schema == dag.params["store_schema"] and dag.max_active_runs == 1
    # the lead solver starts with the run, in its worker, beside the sensor
    lead = dag.get_task("lead")
    assert isinstance(lead, SolveTaskOperator) and not lead.upstream_task_ids
    assert lead.deferrable and lead.settings["start_in_worker_s"] == "{{ params.lead_in_worker_s }}"
    assert dag.params["lead_in_worker_s"] == 30
    assert dag.get_task("advise").lead_solvers == 1  # the mapped solvers are the others
    assert {"fan_out", "claim_batch", "max_in_flight", "time_budget_s"} <= set(dag.params)
    assert dag.params["fan_out"] == 0  # 0: as many solvers as the router advises
    assert dag.params["linger_s"] == 300  # warm between bursts of work by default
    solve = dag.get_task("solve")
    assert isinstance(solve, MappedOperator)
    assert solve.operator_class is SolveTaskOperator
    assert solve.partial_kwargs["router_conn_id"] == "llm_router_default"
    assert solve.partial_kwargs["backend_conn_id"] == "models_backend_default"
    assert solve.partial_kwargs["postgres_conn_id"] == "postgres_default"
    assert solve.upstream_task_ids == {"advise"}  # no planning task in between
    assert dag.render_template_as_native_obj  # the settings render as numbers


def test_drain_queues_the_lead_before_the_sensor(bag) -> None:
    """The scheduler and the executor take task instances by priority: the lead, whose
    first calls start the drain, goes first to a worker and to the API server's ``ti_run``
    (ranked by downstream weight alone, the sensor, with the mapped solvers below it, would
    go first)."""
    dag = bag.dags["llm_router_drain"]
    lead, advise = dag.get_task("lead"), dag.get_task("advise")
    assert not lead.upstream_task_ids and not advise.upstream_task_ids  # they start together

    def rank(task):  # Airflow's default weight rule: its own weight and its downstream's
        assert task.weight_rule == "downstream"
        below = task.get_flat_relative_ids(upstream=False)
        return task.priority_weight + sum(dag.get_task(t).priority_weight for t in below)

    assert rank(lead) > rank(advise)


def test_drain_sensor_gives_one_settings_dict_per_solver(bag) -> None:
    sensor = bag.dags["llm_router_drain"].get_task("advise")
    from airflow_llm_router.operators.solve import SolveTaskOperator
    from airflow_llm_router.solver.settings import DrainSettings

    assert set(sensor.solver_kwargs) == {"settings", "store_schema"}
    # every templated setting is a DrainSettings field, under the same name
    assert set(sensor.solver_kwargs["settings"]) <= set(DrainSettings.model_fields)
    rendered = {"settings": {"claim_batch": 50, "max_in_flight": 20}, "store_schema": "s"}
    sensor.solver_kwargs = rendered
    sensor.fan_out = 3  # in all: the lead and 2 mapped
    kwargs = sensor._result({"solvers": 7}, {})
    assert kwargs == [rendered] * 2
    solver = SolveTaskOperator(task_id="solve", **kwargs[0])
    assert solver.parsed_settings() == DrainSettings(claim_batch=50, max_in_flight=20)
    sensor.fan_out = 0  # as advised
    assert len(sensor._result({"solvers": 7}, {})) == 6
    assert sensor._result({"solvers": 1}, {}) == []  # the lead alone
    sensor.fan_out = "many"
    with pytest.raises(ValueError, match="fan_out"):
        sensor._result({"solvers": 7}, {})


def test_single_prompt_templates_the_prompt(bag) -> None:
    solve = bag.dags["llm_router_single_prompt"].get_task("solve")
    assert solve.prompt == "{{ params.prompt }}"
    assert "prompt" in solve.template_fields


def test_as_is_baseline_has_twenty_workers_and_the_thirty_minute_kill(bag) -> None:
    dag = bag.dags["as_is_baseline"]
    worker = dag.get_task("solve_batch")
    assert worker.partial_kwargs["execution_timeout"] == timedelta(minutes=30)
    assert dag.params["worker_timeout_s"] == 1800
    assert set(worker.op_kwargs_expand_input.value) == {"task_ids"}
    assert worker.upstream_task_ids == {"fetch_unsolved", "backend_models"}

    module = _load(EXAMPLES / "as_is_baseline.py")
    assert module.N_WORKERS == 20 and module.ITEMS_PER_CALL == 10
    batches = module.split_equal(list(range(1, 104)), module.N_WORKERS)
    assert len(batches) == 20 and [i for b in batches for i in b] == list(range(1, 104))
    assert {len(b) for b in batches} == {5, 6}
    assert module.split_equal([1, 2], 20)[2:] == [[]] * 18


def test_as_is_model_choice() -> None:
    module = _load(EXAMPLES / "as_is_baseline.py")
    models = ["a", "b", "c"]
    assert module.pick_model(7, ["coder", "chat-large"], models) == "coder"
    assert [module.pick_model(i, None, models) for i in (3, 4, 5)] == ["a", "b", "c"]


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
