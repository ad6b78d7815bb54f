"""Call options a stored task may carry in its metadata, under ``metadata.llm_call``.

A small allowlist, checked at enqueue (so a bad option is refused there, naming the field,
not found out by a call hours later) and read by the solver, which hands them to the
backend protocol (:mod:`airflow_llm_router.backend.protocols`)::

    {"llm_call": {"system": "Answer in French.", "temperature": 0.2, "top_p": 0.9,
                  "stop": ["\\n\\n"], "max_output_tokens": 256}}

``max_output_tokens`` is the task's output cap (every protocol sends it, and admission
reserves input + cap); the others are passed through by the ``openai`` and ``anthropic``
protocols and refused by ``models_backend``, whose ``/single`` has no place for them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from airflow_llm_router.exceptions import TaskValidationError
from airflow_llm_router.tokens import whole_number

__all__ = ["METADATA_KEY", "OPTIONS", "PASSED_THROUGH", "call_options", "check_call_options"]

#: the metadata key that holds a task's call options
METADATA_KEY = "llm_call"
#: the options a protocol passes to the model (beyond the prompt and the output cap)
PASSED_THROUGH = ("system", "temperature", "top_p", "stop")
#: every option a task may set
OPTIONS = (*PASSED_THROUGH, "max_output_tokens")
#: most stop sequences one call takes (OpenAI's limit; Anthropic's is higher)
MAX_STOP = 4


def _number(field: str, value: object, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TaskValidationError(field, f"must be a number from 0 to {high:g}")
    if not 0 <= value <= high:
        raise TaskValidationError(field, f"is {value!r}; give a number from 0 to {high:g}")


def _stop(field: str, value: object) -> None:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_STOP or not all(
            isinstance(s, str) and s for s in items):
        raise TaskValidationError(field, "must be a non-empty string or a list of 1 to "
                                  f"{MAX_STOP} non-empty strings")


def check_call_options(value: object, field: str = f"metadata.{METADATA_KEY}") -> None:
    """Refuse call options a protocol could not send, naming the option and the fix.

    :raises TaskValidationError: not a dict, an option outside :data:`OPTIONS`, or a value
        of the wrong type or range.
    """
    if not isinstance(value, Mapping):
        raise TaskValidationError(field, "must be a dict of call options ("
                                  + ", ".join(OPTIONS) + ")")
    for name, option in value.items():
        where = f"{field}.{name}"
        if name not in OPTIONS:
            raise TaskValidationError(where, "is not a call option; known: "
                                      + ", ".join(OPTIONS))
        if name == "system":
            if not isinstance(option, str) or not option:
                raise TaskValidationError(where, "must be a non-empty string")
        elif name == "temperature":
            _number(where, option, 2.0)
        elif name == "top_p":
            _number(where, option, 1.0)
        elif name == "stop":
            _stop(where, option)
        elif not whole_number(option) or option < 1:
            raise TaskValidationError(where, "must be a whole number >= 1 (tokens)")


def call_options(metadata: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A stored task's call options (None: it sets none). Checked at enqueue already."""
    options = (metadata or {}).get(METADATA_KEY)
    return dict(options) if isinstance(options, Mapping) and options else None
