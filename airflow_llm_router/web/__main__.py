"""Serve the HTTP API on its own, outside the Airflow API server (uvicorn).

    python -m airflow_llm_router.web --port 8090 [--host 127.0.0.1]
        [--token-conn-id llm_router_api] [--conn-id llm_router_default] [--namespace NS]
        [--postgres-conn-id postgres_default] [--store-schema llm_router] [--store-table tasks]
        [--backend-conn-id CONN] [--max-wait-s 30] [--max-body-bytes N] [--workers 1]

The router connection and the task store default to the ``[llm_router]`` Airflow config
(``router_conn_id``, ``postgres_conn_id``, ``task_schema``, ``task_table``), as for the
plugin. Every request needs ``Authorization: Bearer <token>``, the token being the password of the
``--token-conn-id`` connection. Prints ``serving on http://HOST:PORT`` once it answers
requests (the app loaded, in a worker process with ``--workers``; ``--port 0``: any free
port, the line says which). Bad options, a missing connection or an
unreachable Redis: one ``error:`` line and exit status 2, before anything listens.

With ``--backend-conn-id`` (a ``models_backend`` connection, any protocol) it
also serves the governed OpenAI-compatible endpoint, ``/v1/chat/completions`` and
``/v1/models`` (docs/openai_endpoint.md). ``--workers N`` runs N uvicorn processes on the
one socket; they share the quotas through Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence

import uvicorn
from airflow.sdk.exceptions import AirflowNotFoundException
from fastapi import FastAPI
from uvicorn.supervisors import Multiprocess

from airflow_llm_router.cli_parser import CliParser, read_connections_as_airflow
from airflow_llm_router.quotas.config import QuotaConfig
from airflow_llm_router.web.errors import first_line
from airflow_llm_router.web.openai_compat import DEFAULT_MAX_BODY_BYTES
from airflow_llm_router.web.readiness import announce_when_answering
from airflow_llm_router.web.standalone import Standalone, read_token

#: Seconds an idle keep-alive connection stays open: longer than HTTP clients keep theirs
#: (httpx: 5 s, uvicorn's own default too), so a client never reuses a connection the
#: server is closing at that moment (a dropped request the client must send again).
KEEP_ALIVE_S = 75
#: Where the parent hands its command line to its worker processes (``--workers``).
WORKER_ARGS_ENV = "LLM_ROUTER_WEB_ARGV"
#: Most worker processes (each holds its own Redis and backend connections).
MAX_WORKERS = 64
#: The command's name when run as a module (``llm-router serve`` passes its own).
MODULE_PROG = "python -m airflow_llm_router.web"


def _port(value: str) -> int:
    if not value.isdigit() or int(value) > 65535:
        raise argparse.ArgumentTypeError(f"--port: {value!r} is not a port (0-65535)")
    return int(value)


def _count(low: int, high: int, name: str) -> Callable[[str], int]:
    def parse(value: str) -> int:
        if not value.isdigit() or not low <= int(value) <= high:
            raise argparse.ArgumentTypeError(f"{name}: {value!r} is not a whole number from "
                                             f"{low} to {high}")
        return int(value)
    return parse


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 3600:
        raise argparse.ArgumentTypeError(f"--max-wait-s: {value!r} is not a number of "
                                         "seconds from 0 to 3600")
    return seconds


def _parser(config: QuotaConfig, prog: str) -> argparse.ArgumentParser:
    """The parser; connections and the task store default to the ``[llm_router]`` config.

    ``prog`` is the command as the operator typed it (``llm-router serve`` or
    ``python -m airflow_llm_router.web``), so usage and errors name what they ran."""
    d = Standalone.from_config(config)
    parser = CliParser(prog=prog,
                       description="Serve the LLM router's HTTP API (admission, task "
                       "ingestion, backlog, quotas) with uvicorn, behind a bearer token.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on "
                        "(default: %(default)s)")
    parser.add_argument("--port", type=_port, required=True, help="port (0: any free one)")
    parser.add_argument("--token-conn-id", default=d.token_conn_id,
                        help="connection whose password is the bearer token "
                        "(default: %(default)s)")
    parser.add_argument("--conn-id", default=d.router_conn_id,
                        help="the llm_router (Redis) connection (default: %(default)s)")
    parser.add_argument("--namespace", help="router namespace (default: the connection's)")
    parser.add_argument("--postgres-conn-id", default=d.postgres_conn_id,
                        help="the task store's PostgreSQL connection (default: %(default)s)")
    parser.add_argument("--store-schema", default=d.store_schema,
                        help="the task store's schema (default: %(default)s)")
    parser.add_argument("--store-table", default=d.store_table,
                        help="the task store's table (default: %(default)s)")
    parser.add_argument("--backend-conn-id", help="a models_backend connection (openai, "
                        "anthropic or models_backend protocol): serve the governed "
                        "OpenAI-compatible endpoint (/v1/chat/completions, /v1/models) "
                        "in front of it")
    parser.add_argument("--max-wait-s", type=_seconds, default=30.0,
                        help="the longest an OpenAI-compatible request waits for room in "
                        "its model's quota before a 429 (default: %(default)s)")
    parser.add_argument("--max-body-bytes", type=_count(1024, 1 << 30, "--max-body-bytes"),
                        default=DEFAULT_MAX_BODY_BYTES, help="the largest OpenAI-compatible "
                        "request body (default: %(default)s)")
    parser.add_argument("--workers", type=_count(1, MAX_WORKERS, "--workers"), default=1,
                        help="uvicorn worker processes on the one socket (default: "
                        "%(default)s)")
    parser.add_argument("--log-level", default="warning",
                        choices=["critical", "error", "warning", "info", "debug"])
    return parser


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _standalone(argv: Sequence[str] | None,
                prog: str = MODULE_PROG) -> tuple[argparse.Namespace, Standalone]:
    quotas = QuotaConfig.from_airflow()
    args = _parser(quotas, prog).parse_args(argv)
    config = Standalone(token_conn_id=args.token_conn_id, router_conn_id=args.conn_id,
                        namespace=args.namespace, postgres_conn_id=args.postgres_conn_id,
                        store_schema=args.store_schema, store_table=args.store_table,
                        quotas=quotas, backend_conn_id=args.backend_conn_id,
                        max_wait_s=args.max_wait_s, max_body_bytes=args.max_body_bytes)
    return args, config


def worker_app() -> FastAPI:
    """A worker process's app (``--workers``), from the parent's command line."""
    _, config = _standalone(json.loads(os.environ[WORKER_ARGS_ENV]))
    return config.app()


def main(argv: Sequence[str] | None = None, prog: str = MODULE_PROG) -> int:
    """Serve until stopped; ``prog`` names the command in usage and errors."""
    args, config = _standalone(argv, prog)
    try:
        token = read_token(config.token_conn_id)
        namespace = asyncio.run(config.check_router())
        asyncio.run(config.check_backend())
        app = config.app(token)
    except AirflowNotFoundException as err:
        return _fail(f"{err}: add the connection (airflow connections add ...) or name another "
                     "one with --token-conn-id / --conn-id / --backend-conn-id")
    except Exception as err:  # one line, never a traceback (nor a secret)
        return _fail(f"{type(err).__name__}: {first_line(err)}")
    try:
        sock = socket.create_server((args.host, args.port))
    except OSError as err:
        return _fail(f"cannot listen on {args.host}:{args.port}: {err.strerror}; pick another "
                     "--port or --host")
    host, port = sock.getsockname()[:2]
    logging.getLogger(__name__).info("router namespace %r", namespace)
    # once a request is answered, not at bind time: the app may load long after
    announce_when_answering(host, port,
                            lambda: print(f"serving on http://{host}:{port}", flush=True))
    if args.workers > 1:
        os.environ[WORKER_ARGS_ENV] = json.dumps(
            list(sys.argv[1:] if argv is None else argv))
        workers = uvicorn.Config("airflow_llm_router.web.__main__:worker_app", factory=True,
                                 workers=args.workers, log_level=args.log_level, lifespan="off",
                                 timeout_keep_alive=KEEP_ALIVE_S)
        Multiprocess(workers, sockets=[sock]).run()
        return 0
    server = uvicorn.Server(uvicorn.Config(app, log_level=args.log_level, lifespan="off",
                                           timeout_keep_alive=KEEP_ALIVE_S))
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    read_connections_as_airflow()
    sys.exit(main())
