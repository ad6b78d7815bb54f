"""A schemathesis run over the operations of a served OpenAPI document: valid and invalid
requests generated from it (both modes), each answer checked for a 5xx."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err

#: Examples per operation and mode; ``LLMR_FUZZ_EXAMPLES`` raises it for a longer run.
EXAMPLES = int(os.environ.get("LLMR_FUZZ_EXAMPLES", "30"))


def fuzz_for_5xx(schema: Any, keep: Callable[[str], bool], examples: int = EXAMPLES,
                 **call: Any) -> dict[str, set[int]]:
    """Call every operation whose path ``keep`` accepts with generated requests
    (``case.call(**call)``: base URL, headers); fails on the first 5xx. Returns the status
    codes seen per operation label, for the caller to check the run got past validation."""
    operations = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):  # the served document is invalid
            raise result.err()
        if keep(result.ok().path):
            operations.append(result.ok())
    answered: dict[str, set[int]] = {op.label: set() for op in operations}
    for operation, mode in itertools.product(operations, GenerationMode):

        @given(case=operation.as_strategy(mode))
        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def fuzz(case: schemathesis.Case[Any]) -> None:
            response = case.call(**call)
            answered[case.operation.label].add(response.status_code)
            case.validate_response(response, checks=[not_a_server_error])

        fuzz()
    return answered
