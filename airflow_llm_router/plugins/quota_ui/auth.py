"""Who may do what: Airflow's auth manager decides, the routes only ask it.

Quotas are treated like Airflow pools (a shared capacity that operators tune): reading
them needs the right to read pools, changing them the right to edit pools. Under the simple
auth manager a viewer can read and an op or admin can change; under FAB, the roles' pool
permissions decide. Every route depends on one of these, so none is reachable without an
authenticated user (401) and no write without the edit right (403).

Cross-site request forgery: the browser sends Airflow's ``_token`` cookie with any request
to the API server, including one started by another site. Writes authenticated by that
cookie must carry the ``X-Requested-With`` header (which no cross-site form can set, and
which a cross-site script can only set after a CORS preflight that the API server refuses)
and, when the browser says where the request comes from (``Sec-Fetch-Site``, ``Origin``),
come from the same origin. Writes with an ``Authorization: Bearer`` token are not exposed
(browsers never attach it on their own) and need neither. Bodies must be JSON (415 if not).
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

from airflow.api_fastapi.auth.managers.base_auth_manager import ResourceMethod
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import PoolDetails
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import Depends, HTTPException, Request, status

CSRF_HEADER = "X-Requested-With"
_SAFE_FETCH_SITES = ("same-origin", "none")


def _auth_manager() -> Any:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


def _allowed(method: ResourceMethod, user: BaseUser) -> bool:
    return bool(_auth_manager().is_authorized_pool(method=method, details=PoolDetails(),
                                                   user=user))


def can_read(user: GetUserDep) -> BaseUser:
    """An authenticated user allowed to read pools (401 without a user, 403 without right)."""
    if not _allowed("GET", user):
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            "reading LLM quotas needs the permission to read pools")
    return user


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


def can_edit(request: Request, user: GetUserDep) -> BaseUser:
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
    return user


def may(method: ResourceMethod, user: BaseUser) -> bool:
    """Whether ``user`` may ``method`` quotas (pools), as the routes above decide it: the
    page asks (``GET /api/me``) to offer only the controls the user may use."""
    return _allowed(method, user)


Reader = Annotated[BaseUser, Depends(can_read)]
Editor = Annotated[BaseUser, Depends(can_edit)]
