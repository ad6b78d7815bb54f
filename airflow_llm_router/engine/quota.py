"""Per-model quotas: what the router enforces, validated before it reaches Redis."""

from __future__ import annotations

import json
from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from airflow_llm_router.exceptions import QuotaValidationError
from airflow_llm_router.names import MODEL_NAME_RE
from airflow_llm_router.names import validate_model_name as _validate_name

__all__ = ["MODEL_NAME_RE", "ModelQuota", "RouterBudget", "field_hint", "validate_model_name"]

_FIXES = {
    "rpm": "a whole number of requests per window, at least 1 and at most 10^15",
    "tpm": "a whole number of tokens (input + output) per window, at least 1 and at most 10^15",
    "max_concurrency": "a whole number of calls in flight, at least 1 and at most 10^15",
    "input_tpm": "a whole number of input tokens per window, at least 1 and at most 10^15, or null",
    "output_tpm": ("a whole number of output tokens per window, at least 1 and at most 10^15, "
                   "or null"),
    "expected_output_tokens": ("a whole number of output tokens per call, at least 1 and at "
                               "most 10^15"),
    "expected_latency_s": "the seconds one call is expected to take, above 0, or null",
    "weight": "a number above 0 (the model's share among admissible models)",
    "enabled": "true or false",
    "window_s": "the window length in seconds, above 0 (60 for per-minute limits)",
    "input_micro_usd_per_mtok": ("the price of input tokens in micro-dollars per million "
                                 "tokens (a whole number >= 0, at most 10^9; $0.15 per 1M "
                                 "tokens is 150000), or null for an unpriced model"),
    "output_micro_usd_per_mtok": ("the price of output tokens in micro-dollars per million "
                                  "tokens (a whole number >= 0, at most 10^9), or null for an "
                                  "unpriced model"),
    "budget_micro_usd": ("the spend allowed per budget period in micro-dollars (a whole "
                         "number >= 0, at most 10^15; $25 is 25000000), or null for no "
                         "budget; needs a price"),
    "overflow_threshold": ("the share of the model's window in use (0 to 1) above which an "
                           "ordered list's later models may take its requests; 1: only "
                           "once it is full"),
    "budget_period_s": ("the budget period in seconds (periods start at multiples of it "
                        "since the Unix epoch; 86400 for a UTC day), at least 0.01 and at "
                        "most 31622400"),
}

#: The largest count a quota may set: counts up to 2**53 stay exact in Redis's Lua numbers
#: (doubles), and no real limit comes near it (a larger value is a typo, e.g. 1e40).
MAX_COUNT = 10**15

PositiveCount = Annotated[int, Field(strict=True, gt=0, le=MAX_COUNT)]

#: The largest price (micro-dollars per million tokens, $1,000 per million): costs are
#: computed as tokens x price in Lua's doubles, exact below 2**53 (docs/budgets.md).
MAX_PRICE = 10**9
Price = Annotated[int, Field(strict=True, ge=0, le=MAX_PRICE)]
MicroUSD = Annotated[int, Field(strict=True, ge=0, le=MAX_COUNT)]
#: The longest budget period: a leap year, in seconds.
MAX_PERIOD_S = 366 * 86400
PeriodSeconds = Annotated[float, Field(strict=True, ge=0.01, le=MAX_PERIOD_S)]
DEFAULT_PERIOD_S = 86400.0


class ModelQuota(BaseModel):
    """The traffic target of one model, enforced over a sliding window of ``window_s``.

    :param rpm: requests admitted per window.
    :param tpm: tokens (input + output, estimates until settled) admitted per window.
    :param max_concurrency: calls in flight at any instant.
    :param weight: share among admissible models when several could take a request.
    :param enabled: a disabled model admits nothing.
    :param window_s: window length in seconds (60 for per-minute limits).
    :param input_tpm: optional separate limit on input tokens per window.
    :param output_tpm: optional separate limit on output tokens per window.
    :param expected_output_tokens: output tokens assumed per call before any call to this
        model has been observed; afterwards the engine learns the 95th percentile.
    :param expected_latency_s: optional prior of one call's latency (seconds), reported by
        the stats and used by the advice until a call has been observed; afterwards the
        engine learns a running average of observed latencies.
    :param input_micro_usd_per_mtok: price of input tokens, micro-dollars per million tokens
        (integers: fixed point); with either price set the engine tracks the model's spend
        (an unset price counts as 0). None for both: no spend tracking.
    :param output_micro_usd_per_mtok: price of output tokens, same unit.
    :param budget_micro_usd: spend allowed per ``budget_period_s`` (micro-dollars); over it
        the model is not admissible until the period resets (docs/budgets.md). Needs a price.
    :param budget_period_s: the budget period; periods are aligned to multiples of it since
        the Unix epoch (Redis clock), so 86400 is a UTC day.
    :param overflow_threshold: for requests that list their models in order: once this
        share of the model's window is in use (calls or tokens, whichever is most used, of
        the limits in force), a later model of the list below its own threshold with room
        takes the request; with none, the model still takes it while it has room. 1 (the
        default): a later model takes a request only once this one cannot.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    rpm: PositiveCount
    tpm: PositiveCount
    max_concurrency: PositiveCount
    weight: Annotated[float, Field(strict=True, gt=0, le=1e6)] = 1.0
    enabled: Annotated[bool, Field(strict=True)] = True
    window_s: Annotated[float, Field(strict=True, gt=0, le=86400)] = 60.0
    input_tpm: PositiveCount | None = None
    output_tpm: PositiveCount | None = None
    expected_output_tokens: PositiveCount = 256
    expected_latency_s: Annotated[float, Field(strict=True, gt=0, le=86400)] | None = None
    input_micro_usd_per_mtok: Price | None = None
    output_micro_usd_per_mtok: Price | None = None
    budget_micro_usd: MicroUSD | None = None
    budget_period_s: PeriodSeconds = DEFAULT_PERIOD_S
    overflow_threshold: Annotated[float, Field(strict=True, gt=0, le=1)] = 1.0

    @property
    def priced(self) -> bool:
        """Whether the engine tracks this model's spend (either price set)."""
        return (self.input_micro_usd_per_mtok is not None
                or self.output_micro_usd_per_mtok is not None)

    @field_validator("budget_micro_usd")
    @classmethod
    def _budget_needs_a_price(cls, value: int | None, info: ValidationInfo) -> int | None:
        # a patch (bodies.QuotaPatch, every field optional) is checked once merged
        if value is not None and cls is ModelQuota and (
                info.data.get("input_micro_usd_per_mtok") is None
                and info.data.get("output_micro_usd_per_mtok") is None):
            raise ValueError("a budget needs a price: set input_micro_usd_per_mtok and/or "
                             "output_micro_usd_per_mtok, or remove the budget")
        return value

    @field_validator("window_s")
    @classmethod
    def _window_at_least_a_millisecond(cls, value: float) -> float:
        if value < 0.001:
            raise ValueError("must be at least 0.001 s")
        return value

    @classmethod
    def parse(cls, data: Any) -> ModelQuota:
        """Validate a mapping (or a JSON string) into a quota, with errors that name the field."""
        return _validated(cls, data, "quota")

    def to_redis(self) -> str:
        """The compact JSON the Lua scripts read (window in whole milliseconds)."""
        doc: dict[str, Any] = {
            "rpm": self.rpm,
            "tpm": self.tpm,
            "conc": self.max_concurrency,
            "w": self.weight,
            "on": self.enabled,
            "win": max(1, round(self.window_s * 1000)),
            "oprior": self.expected_output_tokens,
        }
        if self.input_tpm is not None:
            doc["itpm"] = self.input_tpm
        if self.output_tpm is not None:
            doc["otpm"] = self.output_tpm
        if self.expected_latency_s is not None:
            doc["lat"] = self.expected_latency_s
        # lib/budget.lua: spend is tracked when "pi" or "po" is present (a missing one is 0)
        if self.input_micro_usd_per_mtok is not None:
            doc["pi"] = self.input_micro_usd_per_mtok
        if self.output_micro_usd_per_mtok is not None:
            doc["po"] = self.output_micro_usd_per_mtok
        if self.budget_micro_usd is not None:
            doc["bud"] = self.budget_micro_usd
        if self.priced or self.budget_period_s != DEFAULT_PERIOD_S:
            doc["bper"] = max(1, round(self.budget_period_s * 1000))
        if self.overflow_threshold < 1:  # lib/capacity.lua: absent is 1
            doc["ovf"] = self.overflow_threshold
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_redis(cls, raw: str | bytes) -> ModelQuota:
        doc = json.loads(raw)
        return cls(
            rpm=doc["rpm"],
            tpm=doc["tpm"],
            max_concurrency=doc["conc"],
            weight=float(doc["w"]),
            enabled=bool(doc["on"]),
            window_s=doc["win"] / 1000,
            input_tpm=doc.get("itpm"),
            output_tpm=doc.get("otpm"),
            expected_output_tokens=doc.get("oprior", 256),
            expected_latency_s=doc.get("lat"),
            input_micro_usd_per_mtok=doc.get("pi"),
            output_micro_usd_per_mtok=doc.get("po"),
            budget_micro_usd=doc.get("bud"),
            budget_period_s=doc.get("bper", DEFAULT_PERIOD_S * 1000) / 1000,
            overflow_threshold=float(doc.get("ovf", 1.0)),
        )


class RouterBudget(BaseModel):
    """The router-wide spend budget: what every priced model of the namespace may spend
    together per period (each model's own ``budget_micro_usd`` applies as well).

    :param budget_micro_usd: micro-dollars per period (fixed point, like the prices).
    :param budget_period_s: the period, aligned to multiples of it since the Unix epoch.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    budget_micro_usd: MicroUSD
    budget_period_s: PeriodSeconds = DEFAULT_PERIOD_S

    @classmethod
    def parse(cls, data: Any) -> RouterBudget:
        """Validate a mapping (or a JSON string) into a budget, with errors that name the
        field."""
        return _validated(cls, data, "budget")

    def to_redis(self) -> str:
        return json.dumps({"b": self.budget_micro_usd,
                           "per": max(1, round(self.budget_period_s * 1000))},
                          separators=(",", ":"))

    @classmethod
    def from_redis(cls, raw: str | bytes) -> RouterBudget:
        doc = json.loads(raw)
        return cls(budget_micro_usd=doc["b"], budget_period_s=doc["per"] / 1000)


Validated = TypeVar("Validated", bound=BaseModel)


def _validated(model: type[Validated], data: Any, what: str) -> Validated:
    """``data`` (a mapping or a JSON string) as ``model``; a QuotaValidationError listing
    each problem as ``<field>: <why> (<fix>)`` otherwise."""
    try:
        if isinstance(data, (str, bytes)):
            return model.model_validate_json(data)
        return model.model_validate(data)
    except ValidationError as err:
        problems = _describe(err)
        raise QuotaValidationError(f"invalid {what}: " + "; ".join(problems),
                                   problems) from err


def _describe(err: ValidationError) -> list[str]:
    """Each error of ``err`` as ``<field>: <why> (<fix>)``."""
    parts = []
    for e in err.errors():
        loc = e["loc"]
        field = ".".join(str(p) for p in loc) or "quota"
        hint = field_hint(str(loc[0]) if loc else "", e["type"])
        parts.append(f"{field}: {e['msg']}" + (f" ({hint})" if hint else ""))
    return parts


def field_hint(field: str, error_type: str) -> str:
    """How to fix a validation error of quota field ``field`` ("" if nothing to add)."""
    if error_type == "extra_forbidden":
        return f"remove it; known fields are {', '.join(ModelQuota.model_fields)}"
    if field in _FIXES:
        return f"expected {_FIXES[field]}"
    return ""


def validate_model_name(model: str) -> str:
    """Return ``model`` if it can be used in keys and lease ids, else raise naming the rule
    (the rule lives in :mod:`airflow_llm_router.names`, shared with the task store)."""
    return _validate_name("model", model)
