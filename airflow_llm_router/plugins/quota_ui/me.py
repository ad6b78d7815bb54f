"""``GET /api/me``: who is signed in and what they may change.

The page asks once and offers only the controls the user may use, so a viewer is never
shown a Save, Delete, Add or Requeue button that could only answer 403. Hiding them is a
courtesy, not the protection: every write route still asks the auth manager itself.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from airflow_llm_router.plugins.quota_ui.auth import Reader, may

router = APIRouter(prefix="/api", tags=["LLM quotas"])


class Me(BaseModel):
    """The signed-in user's rights on this API (decided by Airflow's auth manager)."""

    user: str = Field(description="the name the audit log records for this user's changes")
    can_edit: bool = Field(description="may create, replace and patch quotas and requeue "
                           "dead tasks (the permission to edit pools)")
    can_delete: bool = Field(description="may delete a model's quota (the permission to "
                             "delete pools)")


@router.get("/me", summary="The signed-in user and what they may change")
def me(user: Reader) -> Me:
    return Me(user=user.get_name(), can_edit=may("PUT", user), can_delete=may("DELETE", user))
