"""The model-name rule is one rule: the engine and the store refuse the same names."""

from __future__ import annotations

import pytest

from airflow_llm_router.engine import quota
from airflow_llm_router.exceptions import (
    ModelNameError,
    QuotaValidationError,
    TaskValidationError,
)
from airflow_llm_router.names import MODEL_NAME_RE, validate_model_name


def test_engine_re_exports_the_shared_rule() -> None:
    assert quota.MODEL_NAME_RE is MODEL_NAME_RE


@pytest.mark.parametrize("name", ["gpt-4o", "claude/3.5:sonnet", "m_1@v2+fast", "x" * 128])
def test_good_names_pass(name: str) -> None:
    assert validate_model_name("allowed_models[0]", name) == name


@pytest.mark.parametrize("name", ["", "bad{x}", "a b", "a#1", "a|b", "-lead", "x" * 129, 7, None])
def test_bad_names_are_refused_as_both_error_types(name: object) -> None:
    with pytest.raises(ModelNameError) as info:
        validate_model_name("allowed_models[2]", name)
    err = info.value
    assert isinstance(err, TaskValidationError) and isinstance(err, QuotaValidationError)
    assert err.field == "allowed_models[2]"
    assert str(err).startswith("allowed_models[2]: ")
    assert "letters, digits" in str(err)  # says how to fix it


def test_engine_message_is_unchanged() -> None:
    with pytest.raises(QuotaValidationError, match=r"^model: 'bad\{x\}' is not a valid model"):
        quota.validate_model_name("bad{x}")
