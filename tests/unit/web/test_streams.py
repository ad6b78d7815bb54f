"""An Anthropic stream relayed to an OpenAI client when its ``error`` event is malformed:
the relay still passes an error on, ends the stream and reports the call as failed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from airflow_llm_router.backend.config import BackendConfig
from airflow_llm_router.web.streams import DONE, _from_anthropic


async def _lines(*events: object) -> AsyncIterator[bytes]:
    for event in events:
        yield b"data: " + json.dumps(event).encode()


def test_an_error_event_that_is_not_an_object_still_fails_the_call() -> None:
    events: asyncio.Queue[bytes | None] = asyncio.Queue()
    backend = BackendConfig(base_url="http://backend", protocol="anthropic")
    relayed = asyncio.run(_from_anthropic(
        _lines({"type": "message_start", "message": {"usage": {"input_tokens": 5,
                                                                "output_tokens": 1}}},
               {"type": "error", "error": "overloaded"}),
        events, backend, "m", client_wants_usage=False))
    sent = [events.get_nowait() for _ in range(events.qsize())]
    assert sent[-1] == DONE
    error = json.loads(sent[-2].removeprefix(b"data: "))["error"]
    assert error["type"] == "api_error" and error["message"] == "the backend's stream failed"
    assert relayed.error == "stream ended with an error"
    assert (relayed.input_tokens, relayed.output_tokens) == (None, None)
