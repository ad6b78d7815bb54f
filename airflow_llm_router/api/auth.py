"""Who may call the HTTP API: two rights, decided by whoever serves the app.

Every route depends on :data:`Reader` (``GET /advice``, the OpenAPI document) or
:data:`Writer` (``/schedule``, ``/complete``, ``/heartbeat``, ``/cancel``: they spend the
shared quotas, so they need the right that changing the quotas needs). Both are
placeholders that refuse everything; :func:`~airflow_llm_router.api.app.create_app` maps
them to an :class:`Access`:

- in the Airflow plugin, to the quota API's rules (``plugins/quota_ui/auth.py``): read
  pools to read, edit pools (op or admin under the simple auth manager) to write, with its
  CSRF guard on cookie-authenticated writes;
- standalone, to one bearer token (:func:`token_access`) that grants both rights.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

__all__ = ["Access", "Caller", "Reader", "Writer", "reader", "token_access", "writer"]

_bearer = HTTPBearer(auto_error=False, description="the API's token (standalone) or an "
                     "Airflow JWT (in the Airflow API server)")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


@dataclass(frozen=True)
class Caller:
    """Who made the request: an Airflow user's name, or ``"token"`` (standalone)."""

    name: str


def _refuse() -> Caller:
    raise HTTPException(status.HTTP_401_UNAUTHORIZED, "not authenticated",
                        headers={"WWW-Authenticate": "Bearer"})


def reader(_: Credentials) -> Caller:
    """Placeholder for the read right (replaced by the app's :class:`Access`)."""
    return _refuse()


def writer(_: Credentials) -> Caller:
    """Placeholder for the write right (replaced by the app's :class:`Access`)."""
    return _refuse()


Reader = Annotated[Caller, Depends(reader)]
Writer = Annotated[Caller, Depends(writer)]


@dataclass(frozen=True)
class Access:
    """FastAPI dependencies returning a :class:`Caller` (or raising 401/403) for each right."""

    reader: Callable[..., Any]
    writer: Callable[..., Any]


def token_access(token: str) -> Access:
    """Both rights for requests with ``Authorization: Bearer <token>``, 401 otherwise.

    The comparison takes the same time wherever the given token first differs
    (:func:`hmac.compare_digest`), and neither token appears in an answer or a log line.
    """
    if not token:
        raise ValueError("token: empty; the API needs a token to compare against")
    expected = token.encode()

    def check(credentials: Credentials) -> Caller:
        given = b"" if credentials is None else credentials.credentials.encode()
        if credentials is None or credentials.scheme.lower() != "bearer" \
                or not hmac.compare_digest(given, expected):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED,
                                "send the API token as 'Authorization: Bearer <token>'",
                                headers={"WWW-Authenticate": "Bearer"})
        return Caller("token")

    return Access(reader=check, writer=check)
