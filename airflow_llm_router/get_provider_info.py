"""Provider metadata read by Airflow's providers manager (``airflow providers list``)."""

from __future__ import annotations

from typing import Any

from airflow_llm_router import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-llm-router",
        "name": "LLM Router",
        "description": "Per-model LLM traffic control (rpm, tpm, concurrency) and fast "
        "draining of a PostgreSQL prompt backlog, on Redis admission scripts.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "LLM Router",
                "external-doc-url": "https://pypi.org/project/airflow-llm-router/",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": "LLM Router",
                "python-modules": [
                    "airflow_llm_router.hooks.router",
                    "airflow_llm_router.hooks.models_backend",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": "LLM Router",
                "python-modules": ["airflow_llm_router.operators.solve"],
            }
        ],
        "sensors": [
            {
                "integration-name": "LLM Router",
                "python-modules": ["airflow_llm_router.sensors.backpressure"],
            }
        ],
        "triggers": [
            {
                "integration-name": "LLM Router",
                "python-modules": ["airflow_llm_router.triggers.solve",
                                   "airflow_llm_router.triggers.backlog"],
            }
        ],
        "connection-types": [
            {
                "hook-class-name": "airflow_llm_router.hooks.router.RouterHook",
                "connection-type": "llm_router",
            },
            {
                "hook-class-name": "airflow_llm_router.hooks.models_backend.ModelsBackendHook",
                "connection-type": "models_backend",
            },
        ],
    }
