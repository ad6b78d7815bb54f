"""LiteLLM's proxy (a real third-party OpenAI-compatible server) in a process of its own,
for tests and benchmarks: behind the router (the router's ``openai`` protocol calls it) or
beside it (the same strict backend behind both, ``bench/litellm_side_by_side.py``).

LiteLLM pins versions Airflow's own pins clash with, so it lives in a virtualenv of its
own, made once by ``scripts/litellm_venv.sh`` (which pins the version) and named by
``LLMR_LITELLM_VENV``. Its config is written as JSON (YAML's subset, which the proxy
reads), with a callback module of ours beside it: the proxy's own count of what it
answered, by model group and status, rewritten to a JSON file after each call. A test reads
the proxy's 429s there, not from the router's side.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from llm_router_devkit.processes import ChildServer, start_child
from llm_router_devkit.stack import free_port

__all__ = ["LITELLM_VENV_ENV", "LiteLLMProxy", "litellm_executable"]

#: the environment variable naming LiteLLM's virtualenv (``scripts/litellm_venv.sh``)
LITELLM_VENV_ENV = "LLMR_LITELLM_VENV"

#: The proxy's callback: counts every answer by model group and status. Written next to the
#: config at start (it runs in LiteLLM's interpreter, not ours, so it is kept as text).
_COUNTERS_MODULE = '''
"""What the proxy answered, by model group and status, into $LLMR_LITELLM_COUNTS."""
import json
import os
import threading

from litellm.integrations.custom_logger import CustomLogger


class Counts(CustomLogger):
    def __init__(self):
        super().__init__()
        self.counts = {}
        self.lock = threading.Lock()

    def add(self, group, status):
        with self.lock:
            per_group = self.counts.setdefault(str(group), {})
            per_group[str(status)] = per_group.get(str(status), 0) + 1
            path = os.environ["LLMR_LITELLM_COUNTS"]
            with open(path + ".tmp", "w") as f:
                json.dump(self.counts, f)
            os.replace(path + ".tmp", path)

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        meta = (kwargs.get("litellm_params") or {}).get("metadata") or {}
        self.add(meta.get("model_group") or kwargs.get("model"), 200)

    async def async_post_call_failure_hook(self, request_data, original_exception,
                                           user_api_key_dict, traceback_str=None):
        status = getattr(original_exception, "status_code", None) or "error"
        self.add(request_data.get("model"), status)


counts = Counts()
'''


def litellm_executable(venv: str | None = None) -> Path:
    """The ``litellm`` command of the virtualenv ``venv`` (default: ``$LLMR_LITELLM_VENV``).

    :raises RuntimeError: no virtualenv is named, or it has no ``litellm`` command (say how
        to make it).
    """
    venv = venv or os.environ.get(LITELLM_VENV_ENV)
    if not venv:
        raise RuntimeError(f"{LITELLM_VENV_ENV} is not set; make LiteLLM's virtualenv with "
                           f"`export {LITELLM_VENV_ENV}=$(bash scripts/litellm_venv.sh)`")
    exe = Path(venv) / "bin" / "litellm"
    if not exe.is_file():
        raise RuntimeError(f"{LITELLM_VENV_ENV}={venv} has no bin/litellm; make it with "
                           "`bash scripts/litellm_venv.sh`")
    return exe


class LiteLLMProxy(ChildServer):
    """``litellm --config`` on a free loopback port, stopped on exit.

    :param config: the proxy's config (``model_list``, ``router_settings``, ...); the
        counting callback is added to ``litellm_settings.callbacks``.
    :param master_key: the key clients send (``general_settings.master_key``).
    :param venv: LiteLLM's virtualenv (default: ``$LLMR_LITELLM_VENV``,
        :func:`litellm_executable`).
    :param startup_timeout_s: how long the proxy may take to answer its liveness check.
    :raises RuntimeError: (at construction) no such virtualenv, or no ``litellm`` in it.
    """

    def __init__(self, config: dict[str, Any], master_key: str = "sk-llmr-test",
                 venv: str | None = None, startup_timeout_s: float = 120.0) -> None:
        self.config = config
        self.master_key = master_key
        self.exe = litellm_executable(venv)
        self.startup_timeout_s = startup_timeout_s
        self.port = 0
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The base URL of its OpenAI API (``/chat/completions`` goes under it)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def log(self) -> Path:
        assert self._dir is not None
        return Path(self._dir.name) / "proxy.log"

    def counts(self) -> dict[str, dict[str, int]]:
        """What the proxy answered so far: model group -> status (``"200"``, ``"429"``) ->
        calls."""
        assert self._dir is not None
        path = Path(self._dir.name) / "counts.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def counts_after(self, group: str, calls: int, timeout_s: float = 15.0
                     ) -> dict[str, int]:
        """``group``'s counts once they add up to ``calls`` (the proxy logs an answer after
        sending it), or as they are after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            counts = self.counts().get(group, {})
            if sum(counts.values()) >= calls or time.monotonic() > deadline:
                return counts
            time.sleep(0.05)

    def start(self) -> LiteLLMProxy:
        self._dir = tempfile.TemporaryDirectory(prefix="llmr-litellm-")
        home = Path(self._dir.name)
        (home / "llmr_counters.py").write_text(_COUNTERS_MODULE)
        config = json.loads(json.dumps(self.config))
        config.setdefault("litellm_settings", {}).setdefault("callbacks", []).append(
            "llmr_counters.counts")
        config.setdefault("general_settings", {})["master_key"] = self.master_key
        (home / "config.json").write_text(json.dumps(config, indent=1))
        self.port = free_port()
        env = {"LLMR_LITELLM_COUNTS": str(home / "counts.json"),
               # the model cost map shipped with the package, not fetched from GitHub
               "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
               "LITELLM_LOG": "ERROR"}

        def ready(_pid: int) -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{self.port}/health/liveliness",
                                 timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            self._proc = start_child(
                ["env", *(f"{k}={v}" for k, v in env.items()), str(self.exe),
                 "--config", str(home / "config.json"), "--host", "127.0.0.1",
                 "--port", str(self.port), "--num_workers", "1"],
                log=self.log, ready=ready, what=f"LiteLLM's proxy on port {self.port}",
                timeout_s=self.startup_timeout_s, interval_s=0.2, start_new_session=True)
        except BaseException:
            self.stop()
            raise
        return self
