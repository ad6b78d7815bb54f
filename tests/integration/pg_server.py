"""A private PostgreSQL (the devkit's embedded server) on a free loopback port, for tests
that stop or restart the task store's server (the shared one on 5432 must never be
disturbed)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from llm_router_devkit.demo.embedded import EmbeddedPostgres

__all__ = ["EmbeddedPostgres", "private_postgres"]


@contextmanager
def private_postgres() -> Iterator[EmbeddedPostgres]:
    """A fresh server in a temporary directory, stopped and removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="llmr-pg-") as workdir, \
            EmbeddedPostgres(Path(workdir)) as server:
        yield server
