"""Quotas from a YAML or JSON file, for deploy-time loading, validated like every edit.

The file maps model names to quotas, either at the top level or under ``models``::

    models:
      gpt-small: {rpm: 600, tpm: 200000, max_concurrency: 32}
      gpt-large: {rpm: 60, tpm: 90000, max_concurrency: 8, weight: 2}

Every entry is checked before anything is written; errors name the model and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from airflow_llm_router.engine.quota import ModelQuota, validate_model_name
from airflow_llm_router.exceptions import QuotaValidationError


def parse_quota_document(doc: Any, origin: str = "quotas") -> dict[str, ModelQuota]:
    """Validate a mapping ``{model: quota}`` (or ``{"models": {...}}``).

    :raises QuotaValidationError: listing every bad entry as ``<model>: <field>: <why>``.
    """
    if isinstance(doc, dict) and set(doc) == {"models"}:
        doc = doc["models"]
    if not isinstance(doc, dict) or not doc:
        raise QuotaValidationError(
            f"{origin}: expected a mapping of model names to quotas (optionally under "
            "'models'), e.g. {'gpt-small': {'rpm': 600, 'tpm': 200000, 'max_concurrency': 32}}")
    quotas: dict[str, ModelQuota] = {}
    problems: list[str] = []
    for model, quota in doc.items():
        try:
            validate_model_name(model)
            if not isinstance(quota, dict):
                raise QuotaValidationError(f"quota: expected a mapping of fields, got "
                                           f"{type(quota).__name__}")
            quotas[model] = ModelQuota.parse(quota)
        except QuotaValidationError as err:
            problems.extend(f"{model}: {p}" for p in err.problems)
    if problems:
        raise QuotaValidationError(
            f"{origin}: nothing was loaded; fix: " + " | ".join(problems),
            [f"{origin}: {p}" for p in problems])
    return quotas


def read_quota_file(path: str | Path) -> dict[str, ModelQuota]:
    """Read and validate a ``.json``, ``.yaml`` or ``.yml`` quota file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise QuotaValidationError(f"{path}: cannot read it ({err.strerror})") from err
    except UnicodeDecodeError as err:
        raise QuotaValidationError(
            f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset "
            f"{err.start}); save the file as UTF-8 and load it again") from err
    try:
        doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as err:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise QuotaValidationError(f"{path}: not valid {kind}: {err}") from err
    return parse_quota_document(doc, str(path))
