"""The simulator's configuration: models, their latency and token distributions, limits, faults.

All durations in a profile are in *provider* seconds, as the real backend would experience them.
``time_scale`` divides every one of them (latencies, the sliding window, timeouts), so a run at
``time_scale=60`` lasts a minute of wall clock per provider hour. Keeping the profile in provider
units means one profile describes the real system whatever speed a test or a benchmark runs at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ProviderLimits(BaseModel):
    """A model's provider-side limits; ``None`` means unlimited.

    :param rpm: accepted requests per sliding window.
    :param tpm: accepted tokens (input + output) per sliding window.
    :param max_concurrency: accepted calls in flight at any instant.
    """

    model_config = ConfigDict(extra="forbid")

    rpm: int | None = Field(default=None, gt=0)
    tpm: int | None = Field(default=None, gt=0)
    max_concurrency: int | None = Field(default=None, gt=0)


class ModelProfile(BaseModel):
    """One model: how long it thinks, how much it writes, and what the provider allows.

    Latency is lognormal with median ``median_s`` and shape ``sigma``, then scaled by
    ``(output_tokens / output_tokens_median) ** token_elasticity`` (longer answers take a bit
    longer), with probability ``tail_rate`` multiplied by ``tail_factor`` (stragglers, which
    are what makes a batch wait), and finally clipped to [``min_s``, ``max_s``].
    Output tokens are lognormal with mean ``output_tokens_mean`` and shape
    ``output_tokens_sigma``, clipped to [``output_tokens_min``, ``output_tokens_max``].
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    median_s: float = Field(gt=0)
    sigma: float = Field(default=0.6, ge=0, le=3)
    min_s: float = Field(default=0.5, gt=0)
    max_s: float = Field(default=120.0, gt=0)
    tail_rate: float = Field(default=0.02, ge=0, le=1)
    tail_factor: float = Field(default=3.0, ge=1)
    token_elasticity: float = Field(default=0.3, ge=0, le=2)
    output_tokens_mean: int = Field(default=300, gt=0)
    output_tokens_sigma: float = Field(default=0.6, ge=0, le=3)
    output_tokens_min: int = Field(default=1, gt=0)
    output_tokens_max: int = Field(default=8192, gt=0)
    rpm: int | None = Field(default=None, gt=0)
    tpm: int | None = Field(default=None, gt=0)
    max_concurrency: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check_ranges(self) -> ModelProfile:
        if self.min_s > self.max_s:
            raise ValueError(f"model {self.name!r}: min_s > max_s")
        if not self.min_s <= self.median_s <= self.max_s:
            raise ValueError(f"model {self.name!r}: median_s must lie in [min_s, max_s]")
        if self.output_tokens_min > self.output_tokens_max:
            raise ValueError(f"model {self.name!r}: output_tokens_min > output_tokens_max")
        return self

    @property
    def limits(self) -> ProviderLimits:
        """The model's current provider limits."""
        return ProviderLimits(rpm=self.rpm, tpm=self.tpm, max_concurrency=self.max_concurrency)


class SimulatorProfile(BaseModel):
    """Everything the simulator needs: the clock, the seed, faults and the models.

    :param time_scale: divides every latency, timeout and window; 60 makes a provider minute
        last one wall-clock second.
    :param seed: mixed into every draw; same seed and prompt give the same tokens and latency.
    :param window_s: the provider's sliding window in provider seconds (60: per-minute limits).
    :param error_rate: probability that an accepted call answers 500 after ``error_delay_s``.
    :param timeout_rate: probability that an accepted call hangs ``timeout_s`` then answers 504.
    :param truncate_rate: probability that an accepted call runs its full latency, then
        answers 200 with its JSON body cut in half (a connection dropped by a proxy): the
        provider did the work and charges it, the client cannot read the answer.
    :param slowdown: multiplies every model latency (a degraded provider).
    :param arrival_jitter_s: each call is counted by the provider up to this many wall-clock
        seconds after it reaches the simulator: a delay drawn (from the seed) for each
        quarter of a window, as a proxy queue or a loaded provider gives, so calls sent a
        window apart can be counted less than a window apart. The ``x-received-ms`` header
        says when each was counted.
    :param rate_limit_headers: answer with ``x-ratelimit-limit-*``, ``-remaining-*`` and
        ``-reset-*`` headers (requests and tokens), as OpenAI-style providers do.
    :param output_scale_by_prefix: a prompt that starts with one of these prefixes has its
        output tokens multiplied by its factor (then clipped to the model's range): a task
        kind that asks for a short or a long answer (``{"summary:": 0.1, "essay:": 3}``).
    """

    model_config = ConfigDict(extra="forbid")

    time_scale: float = Field(default=1.0, gt=0)
    seed: int = 0
    window_s: float = Field(default=60.0, gt=0)
    error_rate: float = Field(default=0.0, ge=0, le=1)
    timeout_rate: float = Field(default=0.0, ge=0, le=1)
    truncate_rate: float = Field(default=0.0, ge=0, le=1)
    timeout_s: float = Field(default=120.0, gt=0)
    error_delay_s: float = Field(default=0.5, ge=0)
    slowdown: float = Field(default=1.0, gt=0)
    arrival_jitter_s: float = Field(default=0.0, ge=0, le=60)
    rate_limit_headers: bool = False
    output_scale_by_prefix: dict[str, float] = Field(default_factory=dict)
    models: list[ModelProfile] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> SimulatorProfile:
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError("model names must be unique")
        if self.error_rate + self.timeout_rate + self.truncate_rate > 1:
            raise ValueError("error_rate + timeout_rate + truncate_rate must be <= 1")
        bad = [p for p, f in self.output_scale_by_prefix.items() if not p or f <= 0]
        if bad:
            raise ValueError(f"output_scale_by_prefix: {bad!r}: each prefix must be non-empty "
                             "and its factor > 0")
        return self

    def output_scale(self, prompt: str) -> float:
        """The output factor of ``prompt``'s prefix (``output_scale_by_prefix``), else 1."""
        for prefix, factor in self.output_scale_by_prefix.items():
            if prompt.startswith(prefix):
                return factor
        return 1.0

    @property
    def scaled_window_s(self) -> float:
        """The sliding window in wall-clock seconds."""
        return self.window_s / self.time_scale

    def model(self, name: str) -> ModelProfile | None:
        """The model called ``name``, or ``None``."""
        for m in self.models:
            if m.name == name:
                return m
        return None

    @classmethod
    def from_json(cls, text: str | bytes) -> SimulatorProfile:
        """Parse and validate a JSON profile (raises ``pydantic.ValidationError``)."""
        return cls.model_validate_json(text)

    @classmethod
    def from_file(cls, path: str | Path) -> SimulatorProfile:
        """Load a JSON profile file (no YAML, to keep the dependency set small)."""
        return cls.from_json(Path(path).read_bytes())

    def to_json(self, indent: int | None = 2) -> str:
        """The profile as JSON, loadable again with :meth:`from_json`."""
        return self.model_dump_json(indent=indent)

    def with_overrides(self, **changes: Any) -> SimulatorProfile:
        """A validated copy with some top-level fields changed (e.g. ``time_scale``)."""
        data = self.model_dump()
        data.update({k: v for k, v in changes.items() if v is not None})
        return type(self).model_validate(data)

    @classmethod
    def default(cls, **overrides: Any) -> SimulatorProfile:
        """Ten models from ~1 s to ~2 min, with a mix of roomy and scarce limits.

        The mix is deliberate: fast cheap models bound by rpm, slow reasoners bound by
        concurrency, a scarce premium model a fixed fan-out floods, and one model with no
        concurrency limit, so every kind of binding limit shows up in a benchmark.
        """
        data: dict[str, Any] = {"models": [dict(m) for m in _DEFAULT_MODELS]}
        data.update(overrides)
        return cls.model_validate(data)


# name, median_s, sigma, min_s, max_s, output_tokens_mean, rpm, tpm, max_concurrency
_DEFAULT_ROWS: list[tuple[str, float, float, float, float, int, int, int, int | None]] = [
    ("flash-mini", 1.5, 0.5, 0.8, 20.0, 150, 600, 300_000, None),
    ("flash", 2.0, 0.5, 1.0, 30.0, 250, 300, 200_000, 48),
    ("chat-small", 4.0, 0.6, 1.0, 45.0, 300, 200, 150_000, 32),
    ("chat-medium", 8.0, 0.6, 2.0, 90.0, 400, 120, 120_000, 24),
    ("chat-large", 15.0, 0.6, 3.0, 120.0, 600, 60, 100_000, 16),
    ("coder", 10.0, 0.7, 2.0, 120.0, 800, 90, 40_000, 16),
    ("long-context", 20.0, 0.6, 4.0, 120.0, 700, 30, 200_000, 8),
    ("reasoner-small", 30.0, 0.5, 8.0, 120.0, 1200, 40, 100_000, 12),
    ("reasoner-large", 60.0, 0.4, 15.0, 120.0, 2000, 20, 80_000, 8),
    ("premium-scarce", 12.0, 0.6, 3.0, 120.0, 500, 10, 20_000, 4),
]

_DEFAULT_MODELS: list[dict[str, Any]] = [
    {
        "name": name,
        "median_s": median,
        "sigma": sigma,
        "min_s": lo,
        "max_s": hi,
        "output_tokens_mean": tokens,
        "rpm": rpm,
        "tpm": tpm,
        "max_concurrency": conc,
    }
    for name, median, sigma, lo, hi, tokens, rpm, tpm, conc in _DEFAULT_ROWS
]

