"""The wire format of the Models Backend: every JSON field name in one place.

These are the defaults the real backend uses; the router's client makes them configurable, so
if the real service spells a field differently only that configuration changes. Request bodies
are validated here (a bad body is a 422); responses are plain dicts built from these names.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# Requests
MODEL = "model"
PROMPT = "prompt"
MAX_OUTPUT_TOKENS = "max_output_tokens"
ITEMS = "items"
ID = "id"

# Responses
ANSWER = "answer"
USAGE = "usage"
INPUT_TOKENS = "input_tokens"
OUTPUT_TOKENS = "output_tokens"
LATENCY_S = "latency_s"
RESULTS = "results"
STATUS = "status"
ERROR = "error"
DETAIL = "detail"
REASON = "reason"
RETRY_AFTER_S = "retry_after_s"

# Headers on a 429: whole seconds (RFC 9110), and the precise value in milliseconds.
RETRY_AFTER_HEADER = "Retry-After"
RETRY_AFTER_MS_HEADER = "retry-after-ms"

# Values of ``error``
ERR_RATE_LIMITED = "rate_limited"
ERR_UNKNOWN_MODEL = "unknown_model"
ERR_INTERNAL = "internal_error"
ERR_TIMEOUT = "timeout"

#: Every default field name by role, for clients that map them.
FIELD_NAMES: dict[str, str] = {
    "model": MODEL,
    "prompt": PROMPT,
    "max_output_tokens": MAX_OUTPUT_TOKENS,
    "items": ITEMS,
    "id": ID,
    "answer": ANSWER,
    "usage": USAGE,
    "input_tokens": INPUT_TOKENS,
    "output_tokens": OUTPUT_TOKENS,
    "latency_s": LATENCY_S,
    "results": RESULTS,
    "status": STATUS,
    "error": ERROR,
    "retry_after_s": RETRY_AFTER_S,
}


class SingleRequest(BaseModel):
    """``POST /single``: one prompt for one model."""

    model_config = ConfigDict(populate_by_name=True)

    model: str = Field(alias=MODEL, min_length=1)
    prompt: str = Field(alias=PROMPT)
    max_output_tokens: int | None = Field(default=None, alias=MAX_OUTPUT_TOKENS, gt=0)


class BatchItem(SingleRequest):
    """One item of ``POST /batch``; ``id`` is echoed back in its result."""

    id: str = Field(alias=ID)


class BatchRequest(BaseModel):
    """``POST /batch``: items solved in parallel, answered when the slowest is done."""

    model_config = ConfigDict(populate_by_name=True)

    items: list[BatchItem] = Field(alias=ITEMS)


class LimitsUpdate(BaseModel):
    """``PUT /limits/{model}``: omitted fields keep their value, ``null`` means unlimited."""

    model_config = ConfigDict(extra="forbid")

    rpm: int | None = Field(default=None, gt=0)
    tpm: int | None = Field(default=None, gt=0)
    max_concurrency: int | None = Field(default=None, gt=0)
