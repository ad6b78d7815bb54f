"""A task's call options (``metadata.llm_call``) are checked at enqueue: kept as given when
a protocol can send them, refused naming the option and the fix when not."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.llm_call import call_options
from airflow_llm_router.store import NewTask, TaskStore

GOOD = {"system": "Answer in French.", "temperature": 0.0, "top_p": 1,
        "stop": ["\n\n", "END"], "max_output_tokens": 256}


def test_good_options_are_stored_and_read_back(store: TaskStore) -> None:
    (task_id,) = store.enqueue(["p"], metadata={"source": "crm", "llm_call": GOOD})
    row = store.get(task_id)
    assert row is not None and call_options(row.metadata) == GOOD
    assert call_options({"source": "crm"}) is None


@pytest.mark.parametrize(
    ("options", "field", "fix"),
    [
        ("be brief", "metadata.llm_call", "must be a dict of call options (system, "),
        ({"tools": []}, "metadata.llm_call.tools", "is not a call option; known: system, "),
        ({"system": ""}, "metadata.llm_call.system", "must be a non-empty string"),
        ({"temperature": 2.5}, "metadata.llm_call.temperature",
         "is 2.5; give a number from 0 to 2"),
        ({"temperature": "hot"}, "metadata.llm_call.temperature", "must be a number"),
        ({"top_p": True}, "metadata.llm_call.top_p", "must be a number from 0 to 1"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "metadata.llm_call.stop",
         "must be a non-empty string or a list of 1 to 4"),
        ({"stop": [""]}, "metadata.llm_call.stop", "must be a non-empty string"),
        ({"max_output_tokens": 0}, "metadata.llm_call.max_output_tokens",
         "must be a whole number >= 1"),
    ],
)
def test_bad_options_name_the_field(store: TaskStore, options: Any, field: str,
                                    fix: str) -> None:
    with pytest.raises(TaskValidationError) as info:
        store.enqueue(["p"], metadata={"llm_call": options})
    assert info.value.field == field and str(info.value).startswith(f"{field}: {fix}")
    with pytest.raises(TaskValidationError) as per_task:
        store.enqueue_tasks([NewTask("p"), NewTask("q", metadata={"llm_call": options})])
    assert per_task.value.field == f"tasks[1].{field}"
    assert store.counts()["pending"] == 0
