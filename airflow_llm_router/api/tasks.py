"""Task ingestion over HTTP (``POST /tasks``, ``GET /tasks/{id}``): H3b's module.

A stub until H3b's router lands: :func:`airflow_llm_router.api.app.create_app` already
includes :data:`router` (one line), so replacing this file is all it takes.
"""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["tasks"])
