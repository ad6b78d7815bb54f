"""What both solving operators share: connections, typed settings, and running their
trigger deferred (in the triggerer) or inline (in the worker).

The operator modules do not import the solving triggers (and with them the solver and
its HTTP client, aiohttp) until a task runs: every task process of a DAG imports its DAG
file, so a sensor or a planning task beside a solver would pay for them at its start."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_llm_router.solver.settings import SolveSettings, parse_settings

if TYPE_CHECKING:
    from airflow_llm_router.triggers.solve import DrainTrigger, SolveTrigger

__all__ = ["CALL_MARGIN_S", "SolvingOperator", "event_status", "first_event"]

#: Extra time a deferral may take after its deadline, for calls in flight to end.
CALL_MARGIN_S = 600.0

S = TypeVar("S", bound=SolveSettings)


class SolvingOperator(BaseOperator, Generic[S]):
    """Base of :class:`SolvePromptsOperator` and :class:`SolveTaskOperator`.

    ``settings`` may be the settings object or a dict of its fields; a dict may hold Jinja
    templates (``settings`` is a template field), so it is validated once rendered, at
    ``execute``, and already here when it holds none.
    """

    settings_class: type[S]

    def __init__(self, *, settings: S | Mapping[str, Any] | str | None = None,
                 router_conn_id: str = "llm_router_default",
                 backend_conn_id: str = "models_backend_default",
                 deferrable: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(settings, SolveSettings):
            settings = parse_settings(self.settings_class, settings).model_dump()
        elif settings is not None and not _templated(settings):
            parse_settings(self.settings_class, settings)  # fail at parse time if wrong
        self.settings: Any = settings if isinstance(settings, str) else dict(settings or {})
        self.router_conn_id = router_conn_id
        self.backend_conn_id = backend_conn_id
        self.deferrable = deferrable

    def parsed_settings(self) -> S:
        """The (rendered) settings, validated."""
        return parse_settings(self.settings_class, self.settings)

    def run_trigger(self, trigger: SolveTrigger | DrainTrigger,
                    settings: SolveSettings) -> dict[str, Any]:
        """Defer to ``trigger`` (raises TaskDeferred, resuming in ``execute_complete``), or
        run it here and return its event."""
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_complete",
                       timeout=timedelta(seconds=settings.time_budget_s + CALL_MARGIN_S))
        return asyncio.run(first_event(trigger))

    @staticmethod
    def deadline(settings: SolveSettings) -> float:
        return time.time() + settings.time_budget_s


def _templated(value: object) -> bool:
    """Whether ``value`` (the settings, or one of them) is still a Jinja template."""
    if isinstance(value, str):
        return "{{" in value
    return isinstance(value, Mapping) and any(_templated(v) for v in value.values())


async def first_event(trigger: SolveTrigger | DrainTrigger) -> dict[str, Any]:
    """Run ``trigger`` here (in this event loop) up to its first event."""
    async for event in trigger.run():
        return dict(event.payload)
    raise AirflowException("the solve trigger ended without an event")


def event_status(event: dict[str, Any] | None) -> str:
    """``done`` or ``error``; anything else from the trigger is a bug."""
    if not isinstance(event, dict) or event.get("status") not in ("done", "error"):
        raise AirflowException(f"unexpected event from the solve trigger: {event!r:.200}")
    return str(event["status"])
