"""``GET /api/me`` through the real Airflow API server: what each user may change, as the
auth manager decides (the page hides the controls of what it may not)."""

from __future__ import annotations

from tests.integration.plugins.conftest import QuotaUiStack, api


def test_me_says_what_each_user_may_change(ui: QuotaUiStack, tokens: dict[str, str]) -> None:
    answers = {user: api(ui, tokens[user], "GET", "/api/me") for user in ("admin", "op",
                                                                          "viewer")}
    assert {user: (r.status_code, r.json()) for user, r in answers.items()} == {
        "admin": (200, {"user": "admin", "can_edit": True, "can_delete": True}),
        "op": (200, {"user": "op", "can_edit": True, "can_delete": True}),
        "viewer": (200, {"user": "viewer", "can_edit": False, "can_delete": False}),
    }
    assert api(ui, None, "GET", "/api/me").status_code == 401
    # what it says matches what the write routes do
    assert api(ui, tokens["viewer"], "PUT", "/api/quotas/m",
               json={"rpm": 1, "tpm": 1, "max_concurrency": 1}).status_code == 403
    assert api(ui, tokens["op"], "PUT", "/api/quotas/m",
               json={"rpm": 1, "tpm": 1, "max_concurrency": 1}).status_code == 201
