"""The admission engine: quotas, admission and settling over Redis (docs/engine.md).

The names a caller needs, importable from here::

    from airflow_llm_router.engine import ModelQuota, RouterClient, RouterSettings
"""

from airflow_llm_router.engine.async_client import AsyncRouterClient
from airflow_llm_router.engine.decoding import Decision
from airflow_llm_router.engine.encoding import Completion
from airflow_llm_router.engine.keys import RouterKeys
from airflow_llm_router.engine.quota import ModelQuota
from airflow_llm_router.engine.stats import KindStats, ModelStats, RouterStats
from airflow_llm_router.engine.sync_client import RouterClient
from airflow_llm_router.engine.types import (
    Admission,
    AdmitRequest,
    Rejection,
    RouterSettings,
    Wait,
)

__all__ = [
    "Admission",
    "AdmitRequest",
    "AsyncRouterClient",
    "Completion",
    "Decision",
    "KindStats",
    "ModelQuota",
    "ModelStats",
    "Rejection",
    "RouterClient",
    "RouterKeys",
    "RouterSettings",
    "RouterStats",
    "Wait",
]
