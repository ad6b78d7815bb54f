"""Who may call the HTTP surface: two rights, decided by whoever serves the app.

Every route depends on :data:`Reader` (reads: quotas, stats, advice, backlog, a task, the
OpenAPI document) or :data:`Writer` (everything that spends or changes the shared quotas:
``/schedule``, ``/complete``, ``/heartbeat``, ``/cancel``, quota and budget changes, task
ingestion and requeue). ``GET /me`` says which rights a caller holds (:data:`Rights`).
:func:`~airflow_llm_router.web.app.create_app` installs one of two :class:`Access`
strategies:

- :func:`token_access` (standalone): one bearer token that grants both rights;
- :func:`airflow_access` (the Airflow plugin): Airflow's auth manager decides. Quotas are
  treated like Airflow pools (a shared capacity that operators tune): reading needs the
  right to read pools, writing the right to edit them (deleting a quota: to delete them).
  Under the simple auth manager a viewer can read and an op or admin can write.

Cross-site request forgery (Airflow strategy): the browser sends Airflow's ``_token`` cookie
with any request to the API server, including one started by another site. Writes
authenticated by that cookie must carry the ``X-Requested-With`` header (which no cross-site
form can set, and which a cross-site script can only set after a CORS preflight that the
API server refuses) and, when the browser says where the request comes from
(``Sec-Fetch-Site``, ``Origin``), come from the same origin. Writes with an
``Authorization: Bearer`` token are not exposed (browsers never attach it on their own) and
need neither. Bodies must be JSON (415 if not).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit

from airflow.api_fastapi.auth.managers.base_auth_manager import ResourceMethod
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import PoolDetails
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

__all__ = ["CSRF_HEADER", "Access", "Caller", "Reader", "Rights", "Writer", "airflow_access",
           "reader", "token_access", "writer"]

CSRF_HEADER = "X-Requested-With"
_SAFE_FETCH_SITES = ("same-origin", "none")

_bearer = HTTPBearer(auto_error=False, description="the API's token (standalone) or an "
                     "Airflow JWT (in the Airflow API server)")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


@dataclass(frozen=True)
class Caller:
    """Who made the request: an Airflow user's name, or ``"token"`` (standalone); the
    audit and requeue logs record it."""

    name: str


class Rights(BaseModel):
    """The caller's rights on this API (``GET /me``)."""

    user: str = Field(description="the name the audit log records for this user's changes")
    can_edit: bool = Field(description="may create, replace and patch quotas and requeue "
                           "dead tasks (the permission to edit pools)")
    can_delete: bool = Field(description="may delete a model's quota (the permission to "
                             "delete pools)")


# --- the token strategy (the default dependencies) ------------------------------------------

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


async def rights(caller: Reader) -> Rights:
    """What a reader may do: the token grants everything, unless :class:`Access` replaces it."""
    return Rights(user=caller.name, can_edit=True, can_delete=True)


@dataclass(frozen=True)
class Access:
    """Who may read and write: one bearer token (``token``; see :func:`token_access`), or
    FastAPI dependencies for each right (``reader``, ``writer`` returning a :class:`Caller`
    or raising 401/403, ``rights`` a :class:`Rights`: they replace the token check)."""

    token: str | None = None
    reader: Callable[..., Any] | None = None
    writer: Callable[..., Any] | None = None
    rights: Callable[..., Any] | None = None

    def install(self, app: FastAPI) -> None:
        """Make the app's :data:`Reader`, :data:`Writer` and rights check this access."""
        app.state.api_token = self.token.encode() if self.token else None
        for default, given in ((reader, self.reader), (writer, self.writer),
                               (rights, self.rights)):
            if given is not None:
                app.dependency_overrides[default] = given


def token_access(token: str) -> Access:
    """Both rights for requests with ``Authorization: Bearer <token>``, 401 otherwise."""
    if not token:
        raise ValueError("token: empty; the API needs a token to compare against")
    return Access(token=token)


# --- the Airflow strategy -------------------------------------------------------------------

def _auth_manager() -> Any:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


def _allowed(method: ResourceMethod, user: BaseUser) -> bool:
    return bool(_auth_manager().is_authorized_pool(method=method, details=PoolDetails(),
                                                   user=user))


def _can_read(user: GetUserDep) -> Caller:
    """An authenticated user allowed to read pools (401 without a user, 403 without right)."""
    if not _allowed("GET", user):
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            "reading LLM quotas needs the permission to read pools")
    return Caller(user.get_name())


def _same_origin(request: Request) -> bool:
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in _SAFE_FETCH_SITES:
        return False
    origin = request.headers.get("origin")
    if origin is None or (origin == "null" and site in _SAFE_FETCH_SITES):
        return True
    host = request.headers.get("x-forwarded-host") or request.headers.get("host", "")
    return urlsplit(origin).netloc == host


def csrf_guard(request: Request) -> None:
    """Refuse a cookie-authenticated write that a browser could have sent for another site."""
    authorization = request.headers.get("authorization", "")
    if not authorization.lower().startswith("bearer "):
        if request.headers.get(CSRF_HEADER) is None:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"writes authenticated by the session cookie must send the {CSRF_HEADER} "
                "header (or use an Authorization: Bearer token)")
        if not _same_origin(request):
            raise HTTPException(status.HTTP_403_FORBIDDEN,
                                "cross-site request refused: quotas change only from the "
                                "Airflow UI's own origin")
    if request.method in ("PUT", "PATCH", "POST"):
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                                "send the quota as JSON (Content-Type: application/json)")


def _can_edit(request: Request, user: GetUserDep) -> Caller:
    """An authenticated user allowed to edit pools, on a request that passed the CSRF guard.

    The permission is checked first so that a read-only user learns the real reason (403
    for the permission) whatever headers the request had.
    """
    method: ResourceMethod = "DELETE" if request.method == "DELETE" else "PUT"
    if not _allowed(method, user):
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            "changing LLM quotas needs the permission to edit pools "
                            "(op or admin role)")
    csrf_guard(request)
    return Caller(user.get_name())


def _airflow_rights(user: GetUserDep) -> Rights:
    """The page asks once and offers only the controls the user may use; hiding them is a
    courtesy, not the protection: every write route still asks the auth manager itself."""
    if not _allowed("GET", user):
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            "reading LLM quotas needs the permission to read pools")
    return Rights(user=user.get_name(), can_edit=_allowed("PUT", user),
                  can_delete=_allowed("DELETE", user))


def airflow_access() -> Access:
    """The rights of Airflow users, decided by the API server's auth manager."""
    return Access(reader=_can_read, writer=_can_edit, rights=_airflow_rights)
