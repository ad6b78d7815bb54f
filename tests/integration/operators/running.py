"""Running an operator outside a DAG run: a task-instance context, and a trigger's event."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from airflow.triggers.base import BaseTrigger


def context(map_index: int = -1, try_number: int = 1) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=map_index,
                         try_number=try_number)
    return {"ti": ti}


async def fire(trigger: BaseTrigger) -> dict[str, Any]:
    """The trigger's first event."""
    return dict((await anext(trigger.run())).payload)
