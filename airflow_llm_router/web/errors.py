"""The 422 answer of every route.

A refused body names each bad field in ``field`` (dotted, without the ``body``/``query``
prefix) and says how to fix it in ``msg``, so a caller can fix the request without reading
the OpenAPI document. The app adds hints for quota fields through ``hint``; the task
store's own refusals take the same shape (:func:`store_refusal`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from airflow_llm_router.exceptions import TaskValidationError

__all__ = ["Hint", "first_line", "invalid", "store_refusal", "validation_handler"]

#: ``(request, loc, field, error type) -> how to fix it`` ("" for nothing to add).
Hint = Callable[[Request, list[str], str, str], str]


def first_line(err: BaseException) -> str:
    """The first line of ``err``'s message ("" if none): what an answer or an ``error:``
    line shows of a driver's error, whose further lines (hints, queries) add nothing."""
    return str(err).splitlines()[0] if str(err) else ""


def invalid(detail: list[dict[str, object]]) -> JSONResponse:
    """A 422 with this ``detail`` (entries with ``loc``, ``field``, ``type``, ``msg``)."""
    return JSONResponse({"detail": detail}, status_code=422)


def store_refusal(err: TaskValidationError, under: str = "") -> JSONResponse:
    """The task store's refusal as the shared 422: ``tasks[3].prompt`` becomes
    ``tasks.3.prompt`` (and ``kind`` becomes ``matching.kind`` with ``under="matching"``)."""
    parts = re.findall(r"[^.\[\]]+", err.field)
    if under:
        parts = [under, *parts]
    message = str(err).removeprefix(f"{err.field}: ")
    return invalid([{"loc": ["body", *parts], "field": ".".join(parts),
                     "type": "value_error.task_store", "msg": message}])


def validation_handler(hint: Hint | None = None) -> Callable[[Request, Exception], JSONResponse]:
    """An exception handler for :class:`RequestValidationError` answering 422 naming each
    bad field (``field``) and the fix (in ``msg``, from ``hint``)."""

    def handle(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        detail: list[dict[str, object]] = []
        for error in exc.errors():
            loc = [str(p) for p in error["loc"]]
            name = ".".join(loc[1:]) or loc[0]
            extra = hint(request, loc, name, error["type"]) if hint else ""
            detail.append({"loc": loc, "field": name, "type": error["type"],
                           "msg": error["msg"] + (f" ({extra})" if extra else "")})
        return invalid(detail)

    return handle
