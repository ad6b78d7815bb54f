"""Deterministic draws: what a prompt costs and how long it takes, from a seeded hash.

Every number the simulator makes up for a prompt (output tokens, latency, whether an attempt
fails) comes from a hash of ``(seed, model, prompt)`` (plus the attempt number for faults),
never from a shared random stream. So the same workload costs the same whatever design sends
it, in whatever order and concurrency: two designs run against one seed can be compared
prompt by prompt.
"""

from __future__ import annotations

import enum
import hashlib
import math
from dataclasses import dataclass
from statistics import NormalDist

from airflow_llm_router import count_input_tokens
from llm_router_devkit.simulator.profile import ModelProfile, SimulatorProfile

_STANDARD_NORMAL = NormalDist()
_TWO_64 = float(2**64)


class Fault(enum.Enum):
    """What happens to an accepted call."""

    NONE = "none"
    ERROR = "error"
    TIMEOUT = "timeout"
    TRUNCATED = "truncated"


@dataclass(frozen=True)
class Draw:
    """The simulated cost of one prompt on one model.

    :param key: a digest of (seed, model, prompt): identifies the prompt without keeping it.
    :param input_tokens: from :func:`count_input_tokens`.
    :param output_tokens: drawn, then capped by the caller's ``max_output_tokens``.
    :param latency_s: in provider seconds, before ``slowdown`` and ``time_scale``.
    """

    key: bytes
    input_tokens: int
    output_tokens: int
    latency_s: float

    @property
    def total_tokens(self) -> int:
        """Input + output tokens: what the provider charges against ``tpm``."""
        return self.input_tokens + self.output_tokens


def _uniform(digest: bytes, index: int) -> float:
    """The ``index``-th uniform in (0, 1) from 8 bytes of ``digest`` (never 0 or 1)."""
    raw = int.from_bytes(digest[8 * index : 8 * index + 8], "big")
    return (raw + 0.5) / _TWO_64


def _normal(digest: bytes, index: int) -> float:
    """A standard normal by inverse CDF: stable across Python versions and platforms."""
    return _STANDARD_NORMAL.inv_cdf(_uniform(digest, index))


def prompt_key(seed: int, model: str, prompt: str) -> bytes:
    """The 32-byte digest every draw for (seed, model, prompt) derives from."""
    h = hashlib.blake2b(digest_size=32, person=b"llmr-sim-draw")
    h.update(str(seed).encode())
    h.update(b"\x00")
    h.update(model.encode())
    h.update(b"\x00")
    h.update(prompt.encode("utf-8", "surrogatepass"))
    return h.digest()


def _output_tokens(model: ModelProfile, z: float, scale: float, cap: int | None) -> int:
    """The output tokens at standard normal ``z``: lognormal with mean ``output_tokens_mean``
    x ``scale``, clipped to the model's range, then to ``cap`` (the caller's
    ``max_output_tokens``; None: no cap)."""
    sigma = model.output_tokens_sigma
    mu = math.log(model.output_tokens_mean * scale) - sigma * sigma / 2
    value = round(math.exp(mu + sigma * z))
    value = min(max(value, model.output_tokens_min), model.output_tokens_max)
    return value if cap is None else max(1, min(value, cap))


def _latency(model: ModelProfile, z: float, straggler: bool, output_tokens: int) -> float:
    """The latency at standard normal ``z`` of a call writing ``output_tokens``, multiplied by
    ``tail_factor`` if it is a straggler (see ``ModelProfile``)."""
    base = model.median_s * math.exp(model.sigma * z)
    # Normalising by the median output makes the median latency stay ``median_s``.
    median_tokens = model.output_tokens_mean * math.exp(-(model.output_tokens_sigma**2) / 2)
    base *= (output_tokens / median_tokens) ** model.token_elasticity
    if straggler:
        base *= model.tail_factor
    return float(min(max(base, model.min_s), model.max_s))


def draw_output_tokens(model: ModelProfile, key: bytes, scale: float = 1.0) -> int:
    """Lognormal output tokens with mean ``output_tokens_mean`` x ``scale``, clipped to the
    model's range."""
    return _output_tokens(model, _normal(key, 1), scale, None)


def draw_latency(model: ModelProfile, key: bytes, output_tokens: int) -> float:
    """Provider-seconds latency for a call writing ``output_tokens`` (see ``ModelProfile``)."""
    return _latency(model, _normal(key, 0), _uniform(key, 2) < model.tail_rate, output_tokens)


def output_tokens_quantile(model: ModelProfile, q: float, scale: float = 1.0,
                           max_output_tokens: int | None = None) -> int:
    """The ``q`` quantile of the output tokens a call of ``model`` draws (``scale``: the
    prompt's output factor, :meth:`SimulatorProfile.output_scale`): what a router can know
    of a call's length before it answers, from the distribution rather than the draw."""
    return _output_tokens(model, _STANDARD_NORMAL.inv_cdf(q), scale, max_output_tokens)


#: Points per normal in :func:`mean_latency_s` (its mean is within 0.5 % of the exact one
#: for the default profile's spreads).
_QUADRATURE_POINTS = 96


def mean_latency_s(model: ModelProfile, scale: float = 1.0,
                   max_output_tokens: int | None = None) -> float:
    """The mean provider-seconds latency of ``model``'s calls (``scale`` as in
    :func:`output_tokens_quantile`): what a router can expect of a call before it answers.
    Computed over the same formula as the draws (the latency's and the output's normals at
    their midpoint quantiles, stragglers at ``tail_rate``), so the clipping to
    [``min_s``, ``max_s``] and the output's effect on latency are in it."""
    n = _QUADRATURE_POINTS
    zs = [_STANDARD_NORMAL.inv_cdf((k + 0.5) / n) for k in range(n)]
    outputs = [_output_tokens(model, z, scale, max_output_tokens) for z in zs]
    plain = math.fsum(_latency(model, z, False, out) for z in zs for out in outputs)
    slow = math.fsum(_latency(model, z, True, out) for z in zs for out in outputs)
    return ((1 - model.tail_rate) * plain + model.tail_rate * slow) / (n * n)


def draw(
    profile: SimulatorProfile,
    model: ModelProfile,
    prompt: str,
    max_output_tokens: int | None = None,
) -> Draw:
    """The deterministic cost of ``prompt`` on ``model`` (capped by ``max_output_tokens``)."""
    key = prompt_key(profile.seed, model.name, prompt)
    output_tokens = _output_tokens(model, _normal(key, 1), profile.output_scale(prompt),
                                   max_output_tokens)
    latency = draw_latency(model, key, output_tokens)
    return Draw(
        key=key,
        input_tokens=count_input_tokens(prompt),
        output_tokens=output_tokens,
        latency_s=latency,
    )


def draw_fault(profile: SimulatorProfile, key: bytes, attempt: int) -> Fault:
    """Whether accepted attempt number ``attempt`` (0-based) of a prompt fails, and how.

    Mixing in the attempt lets a retry of a failed prompt succeed, as with a real provider,
    while a rerun of the same workload (after ``/stats/reset``) fails the same attempts.
    """
    if profile.error_rate <= 0 and profile.timeout_rate <= 0 and profile.truncate_rate <= 0:
        return Fault.NONE
    h = hashlib.blake2b(key, digest_size=8, person=b"llmr-sim-fault")
    h.update(attempt.to_bytes(8, "big"))
    u = _uniform(h.digest(), 0)
    if u < profile.error_rate:
        return Fault.ERROR
    if u < profile.error_rate + profile.timeout_rate:
        return Fault.TIMEOUT
    if u < profile.error_rate + profile.timeout_rate + profile.truncate_rate:
        return Fault.TRUNCATED
    return Fault.NONE
