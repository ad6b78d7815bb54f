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
        "plugins": [
            {
                "name": "llm_router",
                "plugin-class": "airflow_llm_router.plugins.llm_router.LLMRouterPlugin",
            }
        ],
        "config": {
            "llm_router": {
                "description": "Where the LLM router's quota store and router live.",
                "options": {
                    "router_conn_id": _option("The llm_router connection (Redis).",
                                              "llm_router_default"),
                    "postgres_conn_id": _option("The PostgreSQL connection of the quota "
                                                "store.", "postgres_default"),
                    "quota_schema": _option("Schema of the quota and audit tables.",
                                            "llm_router"),
                    "quota_table": _option("Name of the quota table (the audit table "
                                           "adds _audit).", "quotas"),
                    "restore_quotas": _option("Router clients restore the quotas from the "
                                              "quota store when Redis has lost them.",
                                              "True", "boolean"),
                },
            }
        },
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


def _option(description: str, default: str, kind: str = "string") -> dict[str, Any]:
    return {"description": description, "version_added": "0.1.0", "type": kind,
            "example": None, "default": default}
