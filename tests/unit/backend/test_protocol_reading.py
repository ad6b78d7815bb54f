"""What each protocol reads from an answer and from its headers, on bodies and headers a
provider may send (the simulator's faces cover the usual ones over HTTP)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from multidict import CIMultiDict

from airflow_llm_router.backend.config import BackendConfig
from airflow_llm_router.backend.protocols import PROTOCOLS, Call

CONFIG = BackendConfig(base_url="http://backend", max_output_tokens=100)
OPENAI, ANTHROPIC = PROTOCOLS["openai"], PROTOCOLS["anthropic"]


def _in(seconds: float) -> str:
    return datetime.fromtimestamp(time.time() + seconds, timezone.utc).isoformat() \
        .replace("+00:00", "Z")


def test_anthropic_counts_cache_reads_and_writes_as_input() -> None:
    doc = {"content": [{"type": "text", "text": "Bon"}, {"type": "tool_use", "id": "x"},
                       {"type": "text", "text": "jour"}],
           "usage": {"input_tokens": 10, "output_tokens": 5,
                     "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000}}
    answer = ANTHROPIC.answer(doc, CONFIG)
    assert answer is not None
    assert (answer.text, answer.input_tokens, answer.output_tokens) == ("Bonjour", 1110, 5)


@pytest.mark.parametrize("usage", [{"prompt_tokens": -1, "completion_tokens": 3},
                                   {"prompt_tokens": True, "completion_tokens": 3},
                                   {"prompt_tokens": 3}, "lots"])
def test_usage_that_is_not_a_count_is_unknown(usage: object) -> None:
    """Unknown usage keeps the engine's estimate (never less than the call spent)."""
    doc = {"choices": [{"message": {"content": None, "refusal": "no"}}], "usage": usage}
    answer = OPENAI.answer(doc, CONFIG)
    assert answer is not None and answer.text == ""
    assert (answer.input_tokens, answer.output_tokens) == (None, None)


@pytest.mark.parametrize("doc", [{}, {"choices": []}, {"choices": [{"text": "legacy"}]},
                                 {"choices": ["x"]}])
def test_an_openai_body_without_a_message_has_no_answer(doc: dict[str, object]) -> None:
    assert OPENAI.answer(doc, CONFIG) is None
    assert ANTHROPIC.answer({"completion": "legacy"}, CONFIG) is None


def test_anthropic_headers_hold_until_the_reset_time() -> None:
    headers = CIMultiDict({
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": _in(2.0),
        "anthropic-ratelimit-tokens-limit": "40000",
        "anthropic-ratelimit-tokens-remaining": "0",
        "anthropic-ratelimit-tokens-reset": _in(-5.0),  # past: nothing to hold
        "x-ratelimit-limit-requests": "7",  # OpenAI's spelling: not this protocol's
    })
    said = ANTHROPIC.signals(headers)
    assert (said.limit_requests, said.limit_tokens) == (50, 40000)
    assert said.hold_s is not None and 1.0 < said.hold_s <= 2.0
    assert OPENAI.signals(headers).limit_requests == 7


@pytest.mark.parametrize("reset", ["soon", "2025-01-01T00:00:00", "", "1.5s"])
def test_an_unreadable_anthropic_reset_is_ignored(reset: str) -> None:
    said = ANTHROPIC.signals({"anthropic-ratelimit-requests-remaining": "0",
                              "anthropic-ratelimit-requests-reset": reset,
                              "anthropic-ratelimit-requests-limit": "many"})
    assert (said.hold_s, said.limit_requests) == (None, None)


def test_bodies_carry_the_cap_and_the_options_where_each_api_takes_them() -> None:
    options = {"system": "Be brief.", "temperature": 0.5, "stop": "END", "top_p": 0.5}
    call = Call("m", "Hello", 20, options)
    openai = OPENAI.body(call, CONFIG.model_copy(update={"max_tokens_field":
                                                         "max_completion_tokens"}))
    assert openai == {"model": "m", "max_completion_tokens": 20, "temperature": 0.5,
                      "top_p": 0.5, "stop": "END",
                      "messages": [{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": "Hello"}]}
    anthropic = ANTHROPIC.body(Call("m", "Hello", None, options), CONFIG)
    assert anthropic == {"model": "m", "max_tokens": 100, "system": "Be brief.",
                         "temperature": 0.5, "top_p": 0.5, "stop_sequences": ["END"],
                         "messages": [{"role": "user", "content": "Hello"}]}
