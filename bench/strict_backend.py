"""A strict Models Backend: real per-model limits enforced exactly at arrival, for measuring
how well the router keeps under a provider's limits (``bench/fidelity.py``).

    python -m bench.strict_backend --port 0 --config limits.json

It speaks the Models Backend's HTTP contract (``POST /single``, ``POST /batch``, the
default field names of :class:`airflow_llm_router.backend.config.BackendFields`) and
nothing else of the devkit's simulator: its limiter is written here, on purpose apart, so
that a bug shared by the router and the simulator cannot hide a violation.

The config file (JSON)::

    {"seed": 1,
     "cap_field": "max_output_tokens",     # name of the output cap in request bodies
     "rate_limit_headers": false,          # send x-ratelimit-* headers
     "models": {"m1": {"rpm": 10, "tpm": 20000, "max_concurrency": 8, "window_s": 1.0,
                       "output_tokens": [20, 400], "latency_s": [0.05, 0.2],
                       "chars_per_token": 4}}}

``rpm``/``tpm``/``max_concurrency`` may be null (no limit). Per call:

- input tokens are ``max(1, len(prompt) // chars_per_token)``;
- output tokens are drawn uniformly in ``output_tokens`` from a hash of (seed, model,
  prompt): the same prompt always gets the same length, and a cap in the body
  (``cap_field``) cuts it: ``min(drawn, cap)``; latency likewise from ``latency_s``;
- the call is counted at its ARRIVAL, before it runs: it is admitted only if the window
  ``(t - window_s, t]`` of admitted calls, with it, holds at most ``rpm`` requests and
  ``tpm`` tokens (its actual input + output), and fewer than ``max_concurrency`` calls are
  running; otherwise it is answered 429 with ``Retry-After`` (whole seconds, rounded up)
  and ``retry-after-ms``: when the window (or a running call) will have made room. A call
  that alone exceeds ``tpm`` is answered 413.

``GET /stats`` gives per model: accepted, 429s (by reason), and exact peaks computed from
the arrival timestamps: requests and tokens in any window of ``window_s``, both of the
admitted calls and of every arrival (admitted or not: what the router sent), and peak
concurrency. ``GET /arrivals`` gives every arrival (monotonic seconds, tokens, status), so
a caller can measure against any other target. ``POST /reset`` clears everything.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import hashlib
import json
import math
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

__all__ = ["ModelLimits", "StrictBackend", "StrictBackendProcess", "create_app",
           "peak_in_window"]


@dataclass(frozen=True)
class ModelLimits:
    """One model's real limits and behaviour."""

    rpm: int | None
    tpm: int | None
    max_concurrency: int | None
    window_s: float = 60.0
    output_tokens: tuple[int, int] = (20, 400)
    latency_s: tuple[float, float] = (0.05, 0.2)
    chars_per_token: int = 4

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelLimits:
        known = {"rpm", "tpm", "max_concurrency", "window_s", "output_tokens", "latency_s",
                 "chars_per_token"}
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"unknown model settings: {sorted(unknown)}")
        lo, hi = raw.get("output_tokens", (20, 400))
        llo, lhi = raw.get("latency_s", (0.05, 0.2))
        out = cls(rpm=raw.get("rpm"), tpm=raw.get("tpm"),
                  max_concurrency=raw.get("max_concurrency"),
                  window_s=float(raw.get("window_s", 60.0)),
                  output_tokens=(int(lo), int(hi)), latency_s=(float(llo), float(lhi)),
                  chars_per_token=int(raw.get("chars_per_token", 4)))
        if out.window_s <= 0 or not 1 <= lo <= hi or not 0 <= llo <= lhi:
            raise ValueError(f"bad model settings: {raw}")
        for name in ("rpm", "tpm", "max_concurrency"):
            value = getattr(out, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or null, not {value!r}")
        return out


def _fraction(*parts: object) -> float:
    """A deterministic number in [0, 1) from ``parts``."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def peak_in_window(times: Sequence[float], weights: Sequence[int], window_s: float) -> int:
    """The largest total weight of events in any window ``(s - window_s, s]``; ``times``
    sorted. The maximum is reached with ``s`` at an event, so one two-pointer pass is exact."""
    best = total = 0
    start = 0
    for end, t in enumerate(times):
        total += weights[end]
        while times[start] <= t - window_s:
            total -= weights[start]
            start += 1
        best = max(best, total)
    return best


@dataclass
class _Arrival:
    at: float  # monotonic seconds
    input_tokens: int
    output_tokens: int
    status: int  # 200 admitted, 429 refused, 413 too large
    reason: str | None = None

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass
class _ModelState:
    limits: ModelLimits
    #: admitted calls still in the window: (arrival, tokens), oldest first
    window: deque[tuple[float, int]] = field(default_factory=deque)
    window_tokens: int = 0
    #: end times (monotonic) of the running calls, sorted
    running: list[float] = field(default_factory=list)
    arrivals: list[_Arrival] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)
    peak_concurrency: int = 0

    def expire(self, now: float) -> None:
        edge = now - self.limits.window_s
        while self.window and self.window[0][0] <= edge:
            self.window_tokens -= self.window.popleft()[1]


class Refused(Exception):
    def __init__(self, status: int, reason: str, retry_after_s: float) -> None:
        super().__init__(reason)
        self.status, self.reason, self.retry_after_s = status, reason, retry_after_s


class StrictBackend:
    """The limiter and the counters; every method runs on the event loop, so admission is
    atomic without locks."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.seed = config.get("seed", 1)
        self.cap_field: str = config.get("cap_field", "max_output_tokens")
        self.rate_limit_headers = bool(config.get("rate_limit_headers", False))
        self.limits = {name: ModelLimits.from_dict(raw)
                       for name, raw in config["models"].items()}
        self.models: dict[str, _ModelState] = {}
        self.reset()

    def reset(self) -> None:
        self.models = {name: _ModelState(lim) for name, lim in self.limits.items()}

    def draw(self, model: str, prompt: str, cap: int | None) -> tuple[int, int, float]:
        """(input tokens, output tokens, latency) of ``prompt`` on ``model``."""
        lim = self.limits[model]
        inp = max(1, len(prompt) // lim.chars_per_token)
        lo, hi = lim.output_tokens
        out = lo + int(_fraction(self.seed, model, prompt, "out") * (hi - lo + 1))
        if cap is not None:
            out = min(out, cap)
        llo, lhi = lim.latency_s
        latency = llo + _fraction(self.seed, model, prompt, "latency") * (lhi - llo)
        return inp, out, latency

    def admit(self, model: str, inp: int, out: int, latency: float, now: float) -> None:
        """Count the arrival; raise :class:`Refused` if it breaks a limit."""
        st = self.models[model]
        lim = st.limits
        st.expire(now)
        while st.running and st.running[0] <= now:
            st.running.pop(0)
        tokens = inp + out
        try:
            if lim.tpm is not None and tokens > lim.tpm:
                raise Refused(413, "too_large", 0.0)
            if lim.rpm is not None and len(st.window) + 1 > lim.rpm:
                # the oldest calls that must leave the window for this one to fit
                oldest = st.window[len(st.window) - lim.rpm][0]
                raise Refused(429, "requests", oldest + lim.window_s - now)
            if lim.tpm is not None and st.window_tokens + tokens > lim.tpm:
                excess, wait = st.window_tokens + tokens - lim.tpm, 0.0
                for at, t in st.window:
                    excess -= t
                    wait = at + lim.window_s - now
                    if excess <= 0:
                        break
                raise Refused(429, "tokens", wait)
            if lim.max_concurrency is not None and len(st.running) >= lim.max_concurrency:
                raise Refused(429, "concurrency", st.running[0] - now)
        except Refused as refused:
            st.arrivals.append(_Arrival(now, inp, out, refused.status, refused.reason))
            st.rejected[refused.reason] += 1
            raise
        st.arrivals.append(_Arrival(now, inp, out, 200))
        st.window.append((now, tokens))
        st.window_tokens += tokens
        bisect.insort(st.running, now + latency)
        st.peak_concurrency = max(st.peak_concurrency, len(st.running))

    def headers(self, model: str, received_ms: float) -> dict[str, str]:
        """``x-received-ms`` (when the call arrived, epoch ms) and, if configured, the
        ``x-ratelimit-*`` headers as of now."""
        out = {"x-received-ms": f"{received_ms:.1f}"}
        if not self.rate_limit_headers:
            return out
        now = time.monotonic()
        st = self.models[model]
        st.expire(now)
        lim = st.limits
        reset = (st.window[0][0] + lim.window_s - now) if st.window else 0.0
        reset_s = f"{max(0, math.ceil(reset * 1000))}ms"
        if lim.rpm is not None:
            out.update({"x-ratelimit-limit-requests": str(lim.rpm),
                        "x-ratelimit-remaining-requests": str(max(0, lim.rpm - len(st.window))),
                        "x-ratelimit-reset-requests": reset_s})
        if lim.tpm is not None:
            out.update({"x-ratelimit-limit-tokens": str(lim.tpm),
                        "x-ratelimit-remaining-tokens": str(max(0, lim.tpm
                                                                - st.window_tokens)),
                        "x-ratelimit-reset-tokens": reset_s})
        return out

    def stats(self) -> dict[str, Any]:
        models: dict[str, Any] = {}
        for name, st in self.models.items():
            lim = st.limits
            ok = [a for a in st.arrivals if a.status == 200]
            times_all = [a.at for a in st.arrivals]
            models[name] = {
                "limits": {"rpm": lim.rpm, "tpm": lim.tpm,
                           "max_concurrency": lim.max_concurrency, "window_s": lim.window_s},
                "arrivals": len(st.arrivals),
                "accepted": len(ok),
                "rejected_429": sum(v for k, v in st.rejected.items() if k != "too_large"),
                "rejected_by_reason": dict(st.rejected),
                "input_tokens": sum(a.input_tokens for a in ok),
                "output_tokens": sum(a.output_tokens for a in ok),
                "peak_requests": peak_in_window([a.at for a in ok], [1] * len(ok),
                                                lim.window_s),
                "peak_tokens": peak_in_window([a.at for a in ok], [a.tokens for a in ok],
                                              lim.window_s),
                "peak_arrivals": peak_in_window(times_all, [1] * len(times_all),
                                                lim.window_s),
                "peak_arrival_tokens": peak_in_window(times_all,
                                                      [a.tokens for a in st.arrivals],
                                                      lim.window_s),
                "peak_concurrency": st.peak_concurrency,
            }
        totals = {k: sum(m[k] for m in models.values())
                  for k in ("arrivals", "accepted", "rejected_429")}
        return {"models": models, "totals": totals}

    def arrivals(self) -> dict[str, list[list[Any]]]:
        """Every arrival per model: [monotonic s, input tokens, output tokens, status]."""
        return {name: [[a.at, a.input_tokens, a.output_tokens, a.status] for a in st.arrivals]
                for name, st in self.models.items()}


def _bad(status: int, error: str, detail: str) -> JSONResponse:
    return JSONResponse({"error": error, "detail": detail}, status_code=status)


def _retry_headers(seconds: float) -> dict[str, str]:
    seconds = max(0.0, seconds)
    return {"Retry-After": str(max(1, math.ceil(seconds))),
            "retry-after-ms": str(max(1, math.ceil(seconds * 1000)))}


def _refusal(refused: Refused, model: str) -> dict[str, Any]:
    return {"error": "rate_limited" if refused.status == 429 else "too_large",
            "reason": refused.reason, "model": model,
            "retry_after_s": round(max(0.0, refused.retry_after_s), 3)}


def _answer(prompt: str, inp: int, out: int, latency: float) -> dict[str, Any]:
    return {"answer": f"answer to {prompt[:40]!r} in {out} tokens",
            "usage": {"input_tokens": inp, "output_tokens": out},
            "latency_s": round(latency, 4)}


class _Handlers:
    def __init__(self, backend: StrictBackend) -> None:
        self.backend = backend

    def parse_item(self, doc: Any) -> tuple[str, str, int | None]:
        if not isinstance(doc, dict):
            raise ValueError("a JSON object is expected")
        cap_field = self.backend.cap_field
        model, prompt, cap = doc.get("model"), doc.get("prompt"), doc.get(cap_field)
        if not isinstance(model, str) or not model or not isinstance(prompt, str):
            raise ValueError("model (non-empty string) and prompt (string) are required")
        if cap is not None and (not isinstance(cap, int) or cap < 1):
            raise ValueError(f"{cap_field} must be a positive integer")
        return model, prompt, cap

    def admit(self, model: str, prompt: str, cap: int | None,
              now: float) -> tuple[int, int, float]:
        inp, out, latency = self.backend.draw(model, prompt, cap)
        self.backend.admit(model, inp, out, latency, now)
        return inp, out, latency

    async def single(self, request: Request) -> JSONResponse:
        now = time.monotonic()  # the arrival: before the body is even parsed
        received_ms = time.time() * 1000
        try:
            model, prompt, cap = self.parse_item(await request.json())
        except ValueError as err:
            return _bad(422, "bad_request", str(err))
        if model not in self.backend.limits:
            return _bad(404, "unknown_model", f"unknown model {model!r}")
        try:
            inp, out, latency = self.admit(model, prompt, cap, now)
        except Refused as refused:
            headers = self.backend.headers(model, received_ms)
            if refused.status == 429:
                headers.update(_retry_headers(refused.retry_after_s))
            return JSONResponse(_refusal(refused, model), status_code=refused.status,
                                headers=headers)
        await asyncio.sleep(max(0.0, now + latency - time.monotonic()))
        return JSONResponse(_answer(prompt, inp, out, latency),
                            headers=self.backend.headers(model, received_ms))

    async def batch(self, request: Request) -> JSONResponse:
        """Items admitted one by one at arrival, like separate calls; answered when the
        slowest admitted one is done."""
        now = time.monotonic()
        received_ms = time.time() * 1000
        try:
            doc = await request.json()
            items = doc.get("items") if isinstance(doc, dict) else None
            if not isinstance(items, list):
                raise ValueError("items (a list) is required")
            parsed = [(str(item.get("id")), *self.parse_item(item)) for item in items]
        except (ValueError, AttributeError) as err:
            return _bad(422, "bad_request", str(err))
        results: list[dict[str, Any]] = []
        slowest = 0.0
        for item_id, model, prompt, cap in parsed:
            result: dict[str, Any] = {"id": item_id}
            results.append(result)
            if model not in self.backend.limits:
                result.update({"status": 404, "error": "unknown_model"})
                continue
            try:
                inp, out, latency = self.admit(model, prompt, cap, now)
            except Refused as refused:
                result.update({"status": refused.status, **_refusal(refused, model)})
                continue
            result.update({"status": 200, **_answer(prompt, inp, out, latency)})
            slowest = max(slowest, latency)
        await asyncio.sleep(max(0.0, now + slowest - time.monotonic()))
        models = [m for _, m, _, _ in parsed if m in self.backend.limits]
        headers = self.backend.headers(models[0], received_ms) if models else {}
        return JSONResponse({"results": results}, headers=headers)

    async def health(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "models": len(self.backend.limits)})

    async def stats(self, request: Request) -> JSONResponse:
        return JSONResponse(self.backend.stats())

    async def arrivals(self, request: Request) -> JSONResponse:
        return JSONResponse(self.backend.arrivals())

    async def reset(self, request: Request) -> JSONResponse:
        self.backend.reset()
        return JSONResponse({"status": "reset"})


def create_app(backend: StrictBackend) -> Starlette:
    """The HTTP app serving ``backend``."""
    h = _Handlers(backend)
    return Starlette(routes=[
        Route("/single", h.single, methods=["POST"]),
        Route("/batch", h.batch, methods=["POST"]),
        Route("/health", h.health, methods=["GET"]),
        Route("/stats", h.stats, methods=["GET"]),
        Route("/arrivals", h.arrivals, methods=["GET"]),
        Route("/reset", h.reset, methods=["POST"]),
    ])


class StrictBackendProcess:
    """``python -m bench.strict_backend`` in its own process, for a ``with`` block.

    :param config: the config (written to a temporary file for the child).
    """

    def __init__(self, config: dict[str, Any], startup_timeout_s: float = 20.0) -> None:
        self.config = config
        self._timeout = startup_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> StrictBackendProcess:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(self.config, f)
            self._config_path = Path(f.name)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.strict_backend", "--port", "0",
             "--config", str(self._config_path)],
            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()  # the child binds, then says where
        if not line.startswith("listening on "):
            self.__exit__()
            raise RuntimeError(f"strict backend did not start: {line!r}")
        self.url = line.removeprefix("listening on ")
        import httpx  # the child may still be starting uvicorn: wait for /health

        deadline = time.monotonic() + self._timeout
        while True:
            try:
                httpx.get(f"{self.url}/health", timeout=1).raise_for_status()
                return self
            except httpx.HTTPError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    self.__exit__()
                    raise RuntimeError("strict backend did not answer /health") from None
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc is not None and self._proc.stdout is not None:
            self._proc.stdout.close()
        self._config_path.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.strict_backend",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--config", type=Path, required=True, help="JSON limits per model")
    opts = parser.parse_args(argv)
    backend = StrictBackend(json.loads(opts.config.read_text()))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((opts.host, opts.port))
    sock.listen(2048)
    port = sock.getsockname()[1]
    # the first line of stdout says where it listens (the socket is bound already)
    print(f"listening on http://{opts.host}:{port}", flush=True)
    config = uvicorn.Config(create_app(backend), log_level="warning", access_log=False,
                            backlog=2048)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
