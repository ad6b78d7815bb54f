"""The 422 answer shared by every JSON API of the package (the quota API and this one).

A refused body names each bad field in ``field`` (dotted, without the ``body``/``query``
prefix) and says how to fix it in ``msg``, so a caller can fix the request without reading
the OpenAPI document. Each API adds its own hints through ``hint``.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

__all__ = ["Hint", "first_line", "invalid", "validation_handler"]

#: ``(loc, field, error type) -> how to fix it`` ("" for nothing to add).
Hint = Callable[[list[str], str, str], str]


def first_line(err: BaseException) -> str:
    """The first line of ``err``'s message ("" if none): what an answer or an ``error:``
    line shows of a driver's error, whose further lines (hints, queries) add nothing."""
    return str(err).splitlines()[0] if str(err) else ""


def invalid(detail: list[dict[str, object]]) -> JSONResponse:
    """A 422 with this ``detail`` (entries with ``loc``, ``field``, ``type``, ``msg``)."""
    return JSONResponse({"detail": detail}, status_code=422)


def validation_handler(hint: Hint | None = None) -> Callable[[Request, Exception], JSONResponse]:
    """An exception handler for :class:`RequestValidationError` answering 422 naming each
    bad field (``field``) and the fix (in ``msg``, from ``hint``)."""

    def handle(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        detail: list[dict[str, object]] = []
        for error in exc.errors():
            loc = [str(p) for p in error["loc"]]
            name = ".".join(loc[1:]) or loc[0]
            extra = hint(loc, name, error["type"]) if hint else ""
            detail.append({"loc": loc, "field": name, "type": error["type"],
                           "msg": error["msg"] + (f" ({extra})" if extra else "")})
        return invalid(detail)

    return handle
