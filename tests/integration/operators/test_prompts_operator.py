"""SolvePromptsOperator outside a DAG run: deferral, resume, inline mode, bad input."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_llm_router.operators.prompts import SolvePromptsOperator
from airflow_llm_router.triggers.solve import SolveTrigger
from tests.integration.operators.running import context, fire


def test_direct_prompts_defer_then_return_answers(backend: Any) -> None:
    op = SolvePromptsOperator(task_id="t", prompts=["first question", "second question"],
                              settings={"max_in_flight": 2})
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, SolveTrigger) and deferred.value.method_name == "execute_complete"
    assert trigger.settings["max_in_flight"] == 2
    answers = op.execute_complete(context(), event=asyncio.run(fire(trigger)))
    assert [a["status"] for a in answers] == ["solved", "solved"]
    assert all(a["answer"] and a["model"] and a["output_tokens"] > 0 for a in answers)


def test_single_prompt_inline_returns_one_answer(backend: Any) -> None:
    op = SolvePromptsOperator(task_id="t", prompt="why is the sky blue?", deferrable=False,
                              models=["m3", "m2"])
    answer = op.execute(context())
    assert answer["status"] == "solved" and answer["model"] == "m3"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "prompt, prompts: give exactly one"),
        ({"prompt": "a", "prompts": ["b"]}, "prompt, prompts: give exactly one"),
        ({"prompt": "a", "settings": {"claim_batch": 5}},
         r"settings\.claim_batch: not a setting of SolveSettings"),
        ({"prompt": "a", "settings": {"max_errors": 0}}, r"settings\.max_errors: 0 is wrong"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SolvePromptsOperator(task_id="t", **kwargs)


def test_bad_priority_is_refused_before_any_call() -> None:
    op = SolvePromptsOperator(task_id="t", prompt="a", priority="urgent")
    with pytest.raises(ValueError, match="priority: 'urgent' must be 'hot' or 'bulk'"):
        op.execute(context())


def test_on_budget_reaches_every_item_and_a_bad_one_is_refused() -> None:
    op = SolvePromptsOperator(task_id="t", prompts=["a", "b"], models=["m3", "m2"],
                              on_budget="wait")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, SolveTrigger)
    assert [item["on_budget"] for item in trigger.items] == ["wait", "wait"]
    bad = SolvePromptsOperator(task_id="t", prompt="a", on_budget="later")
    with pytest.raises(ValueError, match="on_budget: 'later' must be 'overflow' or 'wait'"):
        bad.execute(context())
