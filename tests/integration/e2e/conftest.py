from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """A fresh Airflow metadata database (SQLite in the test AIRFLOW_HOME)."""
    from airflow.utils import db

    db.resetdb()
