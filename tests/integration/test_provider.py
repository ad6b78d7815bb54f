"""Registration with Airflow: the provider entry point and its connection types."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_airflow_providers_list_shows_the_provider(tmp_path: Path) -> None:
    airflow = Path(sys.executable).parent / "airflow"
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    out = subprocess.run([str(airflow), "providers", "list", "-o", "json"], env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    providers = {p["package_name"]: p for p in json.loads(out[out.index("[{"):])}
    assert "airflow-llm-router" in providers


def test_provider_info_names_importable_hooks() -> None:
    import importlib

    from airflow_llm_router.get_provider_info import get_provider_info

    info = get_provider_info()
    for conn_type in info["connection-types"]:
        module, _, cls = conn_type["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), cls)
        assert hook.conn_type == conn_type["connection-type"]
