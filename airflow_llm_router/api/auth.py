"""Who may call the HTTP API: two rights, decided by whoever serves the app.

Every route depends on :data:`Reader` (``GET /advice``, the OpenAPI document) or
:data:`Writer` (``/schedule``, ``/complete``, ``/heartbeat``, ``/cancel``: they spend the
shared quotas, so they need the right that changing the quotas needs). Both check the
app's bearer token, if it has one, and refuse everything otherwise;
:func:`~airflow_llm_router.api.app.create_app` installs an :class:`Access`:

- in the Airflow plugin, to the quota API's rules (``plugins/quota_ui/auth.py``): read
  pools to read, edit pools (op or admin under the simple auth manager) to write, with its
  CSRF guard on cookie-authenticated writes (FastAPI dependency overrides);
- standalone, to one bearer token (:func:`token_access`) that grants both rights.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

__all__ = ["Access", "Caller", "Reader", "Writer", "reader", "token_access", "writer"]

_bearer = HTTPBearer(auto_error=False, description="the API's token (standalone) or an "
                     "Airflow JWT (in the Airflow API server)")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


@dataclass(frozen=True)
class Caller:
    """Who made the request: an Airflow user's name, or ``"token"`` (standalone)."""

    name: str


def _token_caller(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Caller:
    """The caller if the request carries the app's token (``app.state.api_token``), else 401.

    The comparison takes the same time wherever the given token first differs
    (:func:`hmac.compare_digest`), and neither token appears in an answer or a log line.
    """
    expected: bytes | None = getattr(request.app.state, "api_token", None)
    given = b"" if credentials is None else credentials.credentials.encode()
    if expected is None or credentials is None \
            or not hmac.compare_digest(given, expected):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED,
                            "send the API token as 'Authorization: Bearer <token>'",
                            headers={"WWW-Authenticate": "Bearer"})
    return Caller("token")


async def reader(request: Request, credentials: Credentials) -> Caller:
    """The read right: the app's bearer token, unless the app's :class:`Access` replaces it.

    ``async`` so that checking a token costs no trip to the thread pool.
    """
    return _token_caller(request, credentials)


async def writer(request: Request, credentials: Credentials) -> Caller:
    """The write right: the app's bearer token, unless the app's :class:`Access` replaces it."""
    return _token_caller(request, credentials)


Reader = Annotated[Caller, Depends(reader)]
Writer = Annotated[Caller, Depends(writer)]


@dataclass(frozen=True)
class Access:
    """Who may read and write: one bearer token (``token``; see :func:`token_access`), or
    FastAPI dependencies returning a :class:`Caller` (or raising 401/403) for each right
    (``reader``, ``writer``: they replace the token check)."""

    token: str | None = None
    reader: Callable[..., Any] | None = None
    writer: Callable[..., Any] | None = None

    def install(self, app: FastAPI) -> None:
        """Make the app's :data:`Reader` and :data:`Writer` check this access."""
        app.state.api_token = self.token.encode() if self.token else None
        if self.reader is not None:
            app.dependency_overrides[reader] = self.reader
        if self.writer is not None:
            app.dependency_overrides[writer] = self.writer


def token_access(token: str) -> Access:
    """Both rights for requests with ``Authorization: Bearer <token>``, 401 otherwise."""
    if not token:
        raise ValueError("token: empty; the API needs a token to compare against")
    return Access(token=token)
