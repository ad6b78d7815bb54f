"""The base of this provider's triggers: ``serialize()`` written once.

Airflow rebuilds a trigger in the triggerer from ``serialize()``'s class path and keyword
arguments, so each argument of ``__init__`` must come back exactly as it was given. A
hand-written ``serialize()`` per trigger drifts from its ``__init__`` (an argument added to
one and not the other is silently dropped on a triggerer restart). Here every trigger keeps
each ``__init__`` argument under an attribute of the same name, and ``serialize()`` reads
the arguments off the signature; ``tests/unit/triggers`` round-trips every trigger.
"""

from __future__ import annotations

import inspect
from typing import Any

from airflow.triggers.base import BaseTrigger

__all__ = ["RouterTrigger", "SerializedArguments"]


class SerializedArguments:
    """``serialize()`` for a trigger whose ``__init__`` arguments are all keyword-only and
    kept as attributes of the same name (JSON-serializable values only)."""

    @classmethod
    def argument_names(cls) -> tuple[str, ...]:
        """The ``__init__`` arguments that ``serialize()`` carries."""
        params = inspect.signature(cls.__init__).parameters.values()
        return tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        cls = type(self)
        return (f"{cls.__module__}.{cls.__qualname__}",
                {name: getattr(self, name) for name in cls.argument_names()})


class RouterTrigger(SerializedArguments, BaseTrigger):
    """A plain trigger of this provider (see :class:`SerializedArguments`)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
