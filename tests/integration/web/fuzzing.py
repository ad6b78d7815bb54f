"""A schemathesis run over the operations of a served OpenAPI document: each request
example the document gives, then valid and invalid requests generated from it (both
modes), each answer checked for a 5xx."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.strategies import SearchStrategy
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err

#: Examples per operation and mode; ``LLMR_FUZZ_EXAMPLES`` raises it for a longer run.
EXAMPLES = int(os.environ.get("LLMR_FUZZ_EXAMPLES", "30"))


def fuzz_for_5xx(schema: Any, keep: Callable[[str], bool], examples: int = EXAMPLES,
                 **call: Any) -> dict[str, set[int]]:
    """Call every operation whose path ``keep`` accepts with generated requests
    (``case.call(**call)``: base URL, headers); fails on the first 5xx. Returns the status
    codes seen per operation label, for the caller to check the run got past validation.

    Each request example of the document (OpenAPI ``examples``) is sent once, before the
    generated requests: generation reaches a valid request only by chance (a
    ``/tasks/requeue`` body needs exactly one of two optional fields, which its schema does
    not express: most generated bodies have both or neither), so a caller's check that an
    operation answered a success needs requests known to be valid: the document's examples."""
    operations = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):  # the served document is invalid
            raise result.err()
        if keep(result.ok().path):
            operations.append(result.ok())
    answered: dict[str, set[int]] = {op.label: set() for op in operations}
    for operation in operations:
        for strategy in operation.get_strategies_from_examples():
            sent = _run(strategy, 1, answered, call)
            assert sent == 1, f"{operation.label}: a documented example was not sent"
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _run(operation.as_strategy(mode), examples, answered, call)
    return answered


def _run(strategy: SearchStrategy[schemathesis.Case[Any]], examples: int,
         answered: dict[str, set[int]], call: dict[str, Any]) -> int:
    """Send up to ``examples`` cases drawn from ``strategy``; returns how many were sent."""
    sent = 0

    @given(case=strategy)
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def fuzz(case: schemathesis.Case[Any]) -> None:
        nonlocal sent
        sent += 1
        response = case.call(**call)
        answered[case.operation.label].add(response.status_code)
        case.validate_response(response, checks=[not_a_server_error])

    fuzz()
    return sent
