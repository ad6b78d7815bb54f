"""Run the real Airflow components (scheduler, triggerer, DAG processor, API server) as one
process group, talk to them, and stop them. Used by the smoke test (``tests/smoke``) and the
end-to-end benchmark (``bench/e2e``), which need Airflow's real scheduling, not ``dag.test()``.

Everything here is bounded: every wait has a deadline and polls a condition; nothing sleeps
blindly. Facts it relies on (Airflow 3.3): components start further ``airflow`` processes, so
the venv's ``bin`` must be on PATH; LocalExecutor workers ignore SIGTERM, so the whole stack
runs in one new process group and is stopped with one signal to the group; workers call the
execution API at ``[api] base_url``, so host, port and base URL are set together.

Longer than most modules: starting, health-checking and stopping four Airflow processes
(with their logs, ports and clean-up on every exit path) is one lifecycle, kept in one place.
Reading processes from ``/proc``, and diagnosing a stop that needed SIGKILL, is
:mod:`llm_router_devkit.stack_processes`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from llm_router_devkit.processes import log_tail
from llm_router_devkit.stack_processes import (  # re-exported: callers import them from here
    descendants,
    describe,
    diagnose,
    group_members,
    local_executor_race,
    parent_of,
    render,
)

T = TypeVar("T")

#: A stop's diagnosis shows each stuck component's last LOG_LINES log lines, each cut to
#: LOG_LINE_CHARS: the lines it wrote last, bounded (``read_logs(names, LOG_LINES)``).
LOG_LINES, LOG_LINE_CHARS = 40, 300

#: The components, each started as ``airflow <args>`` with its output in ``<name>.log``.
#: ``--skip-serve-logs``: no log servers, whose fixed default ports (8793, 8794) would clash
#: between runs side by side; the logs are read from disk.
COMPONENTS: dict[str, list[str]] = {
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "api-server": ["api-server"],
}

#: ``AirflowStack.executor`` -> Airflow's ``[core] executor``.
EXECUTORS = {"local": "LocalExecutor", "celery": "CeleryExecutor"}
#: The Celery broker of a stack that names none: the local Redis, on a database number of
#: its own (the router's namespaces and the tests use database 0).
CELERY_BROKER_URL = "redis://127.0.0.1:6379/15"


def free_port() -> int:
    """A TCP port free right now on 127.0.0.1 (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: How long a new stack may take to come up (the API server answering with a token, the DAG
#: processor's first parse): 10-20 s on an idle 2-core machine, past 60 s when the machine
#: runs other work at once (seen with two CPU burners and virtualenvs being built beside it).
STARTUP_TIMEOUT_S = 180.0


def wait_for(what: str, check: Callable[[], T | None], timeout_s: float,
             interval_s: float = 0.25) -> T:
    """Poll ``check`` until it returns something other than None/False, or fail after
    ``timeout_s`` naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


# -- PostgreSQL ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PgServer:
    """Where the local PostgreSQL is, from a libpq DSN such as the tests' ``POSTGRES_DSN``."""

    host: str
    port: int
    user: str
    password: str | None
    dbname: str

    @classmethod
    def from_dsn(cls, dsn: str) -> PgServer:
        params = conninfo_to_dict(dsn)
        return cls(host=str(params.get("host") or "127.0.0.1"),
                   port=int(params.get("port") or 5432),
                   user=str(params.get("user") or "postgres"),
                   password=str(params["password"]) if params.get("password") else None,
                   dbname=str(params.get("dbname") or "postgres"))

    def dsn(self, dbname: str | None = None) -> str:
        return make_conninfo(host=self.host, port=self.port, user=self.user,
                             password=self.password, dbname=dbname or self.dbname)

    def sqlalchemy_url(self, dbname: str) -> str:
        from sqlalchemy.engine import URL

        url = URL.create("postgresql+psycopg2", username=self.user, password=self.password,
                         host=self.host, port=self.port, database=dbname)
        return url.render_as_string(hide_password=False)

    def airflow_conn(self, dbname: str | None = None) -> dict[str, Any]:
        conn: dict[str, Any] = {"conn_type": "postgres", "host": self.host, "port": self.port,
                                "login": self.user, "schema": dbname or self.dbname}
        if self.password:
            conn["password"] = self.password
        return conn

    def create_database(self, name: str) -> None:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                         .format(sql.Identifier(name)))

    def drop_schema(self, name: str) -> None:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


#: The settings the stack gives Airflow beyond where its parts are (home, DAGs, metadata
#: database, executor, parallelism, the API server's address, the login): none of them
#: is a tuning a deployment would not have. Everything else (the log level, the API
#: server's workers, every timeout) is Airflow's default, as a deployment runs it.
#: ``tests/unit/bench/test_as_deployed.py`` holds this; docs/benchmarks.md ("The method")
#: says why each one is here.
WORKAROUNDS: dict[str, str] = {
    # A worker's supervisor notices its task process has exited only when its wait (at
    # most this long, default 5 s) ends, and only then reports the try's end to the
    # scheduler. Airflow 3.3.2 races there: if a deferred task's trigger fires and the
    # resumed try is queued or running before the scheduler has processed the deferring
    # process's (stale) "success" event, it marks the task failed ("state mismatch";
    # apache/airflow#71580, #72716: 3.3.2 guards only a resumed try still "scheduled").
    # Triggers that fire within seconds of deferring (the drain DAG's advice sensor when a
    # backlog waits, a drain with nothing to do) meet it: the default 5 s failed the smoke
    # test when it was written; 1 s keeps the stale event ahead of the resumed try. Rare,
    # not gone: later runs at 5 s passed (the supervisor usually sees the exit at once),
    # and the upstream fix is not released. A deployment on 3.3.x sets the same
    # (docs/deployment.md), so this is no tuning a deployment lacks.
    "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
}


@dataclass
class StopReport:
    term_s: float  # SIGTERM until the group was empty (or until we gave up)
    killed: list[str]  # what was still alive after the grace period and got SIGKILL
    left: list[int]  # still alive after SIGKILL (should be empty)
    #: When something needed SIGKILL: what each leftover was doing just before it (kernel
    #: state, Python stacks) and the tails of the components' logs; also in ``stop.log``.
    #: Empty when the stop needed no SIGKILL.
    diagnostics: str = ""
    #: Set (to its explanation, also at the top of ``diagnostics``) when the stacks prove
    #: that what needed SIGKILL was exactly Airflow's LocalExecutor shutdown race
    #: (:func:`local_executor_race`), not the stack's or the provider's doing; else None.
    airflow_race: str | None = None

    def __str__(self) -> str:
        head = (f"stopped in {self.term_s:.1f} s; SIGKILLed {len(self.killed)}; "
                f"left after SIGKILL {self.left}")
        return "\n".join([head, *self.killed, self.diagnostics]).rstrip()


@dataclass
class AirflowStack:
    """One Airflow installation in ``home`` with its metadata database, run as one process
    group."""

    home: Path
    dags_folder: Path
    sql_alchemy_conn: str
    connections: dict[str, dict[str, Any]]
    extra_env: dict[str, str] = field(default_factory=dict)
    parallelism: int = 8
    api_port: int = field(default_factory=free_port)
    admin_password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    jwt_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    proc: subprocess.Popen[bytes] | None = None
    pgid: int | None = None
    stopped: StopReport | None = None
    #: Components killed with :meth:`kill` and not relaunched: :meth:`alive` expects them gone.
    down: set[str] = field(default_factory=set)
    #: Components started again by :meth:`relaunch` (children of this process, same group).
    relaunched: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _token: str | None = None
    #: ``local`` (LocalExecutor: the scheduler forks the workers) or ``celery``
    #: (CeleryExecutor: the scheduler queues each task on the broker and the workers of
    #: :meth:`add_celery_worker` run them; the Celery provider must be installed, the
    #: devkit's ``bench`` extra).
    executor: str = "local"
    #: The Celery broker; the result backend is the stack's metadata database.
    celery_broker_url: str = CELERY_BROKER_URL
    #: The Celery queue of this stack's tasks: one per stack, so stacks sharing a broker
    #: never run each other's tasks.
    celery_queue: str = field(default_factory=lambda: f"llmr-{secrets.token_hex(5)}")

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor: {self.executor!r} is not one of "
                             f"{', '.join(EXECUTORS)}; pass executor='local' or 'celery'")

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def bin_dir(self) -> Path:
        return Path(sys.executable).parent

    def env(self) -> dict[str, str]:
        """The components' environment: ours, not the test process's Airflow settings
        (the suite's conftest sets unit-test mode and its own AIRFLOW_HOME)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        passwords = self.home / "passwords.json"
        if not passwords.exists():
            passwords.write_text(json.dumps({"admin": self.admin_password}))
        env.update({
            "PATH": f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__EXECUTOR": EXECUTORS[self.executor],
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.sql_alchemy_conn,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__BASE_URL": self.api_url,
            "AIRFLOW__API_AUTH__JWT_SECRET": self.jwt_secret,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            **WORKAROUNDS,
        })
        if self.executor == "celery":
            env.update(self.celery_env())
        for conn_id, conn in self.connections.items():
            env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(conn)
        env.update(self.extra_env)
        return env

    def celery_env(self) -> dict[str, str]:
        """CeleryExecutor's settings: the broker, the result backend (the metadata
        database, ``db+`` its SQLAlchemy URL), and the stack's own queue (``[operators]
        default_queue``: the scheduler sends every task there, the workers read only it).

        A worker killed with a task taken off the broker but not yet acknowledged
        (``task_acks_late``) leaves the message with the broker until the visibility
        timeout, Airflow's default a day, puts it back: 60 s here, well above the drain
        DAG's tasks (they only defer and resume). A task queued longer than
        ``task_queued_timeout`` is queued again by the scheduler."""
        return {
            "AIRFLOW__CELERY__BROKER_URL": self.celery_broker_url,
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{self.sql_alchemy_conn}",
            "AIRFLOW__OPERATORS__DEFAULT_QUEUE": self.celery_queue,
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "60",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "120",
        }

    # -- the CLI --------------------------------------------------------------------------

    def cli(self, *args: str, timeout_s: float = 60.0) -> str:
        """Run ``airflow <args>``; its stdout, or an error with its output."""
        env = self.env()
        done = subprocess.run([str(self.bin_dir / "airflow"), *args], env=env,
                              capture_output=True, text=True, timeout=timeout_s,
                              cwd=self.home, check=False)
        with open(self.home / "cli.log", "a") as log:
            log.write(f"$ airflow {shlex.join(args)}  -> {done.returncode}\n"
                      f"{done.stdout}\n{done.stderr}\n")
        if done.returncode != 0:
            raise RuntimeError(f"airflow {shlex.join(args)} exited {done.returncode}:\n"
                               f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        return done.stdout

    # -- the process group ----------------------------------------------------------------

    def start(self) -> None:
        """Start every component in one new session (``start_new_session``: the child calls
        setsid()), hence one new process group whose id is the leader's pid.

        A small ``sh`` is the group leader; on SIGTERM it waits for its children instead of
        dying first, so the group's processes are reaped in order. Returns once the shell has
        started every component: a SIGTERM sent earlier would reach the shell before it
        forked the rest, which would then run on unsignalled.
        """
        airflow = shlex.quote(str(self.bin_dir / "airflow"))
        lines = ["trap 'wait' TERM INT"]
        for name, args in COMPONENTS.items():
            log = shlex.quote(str(self.home / f"{name}.log"))
            pid_file = shlex.quote(str(self.home / f"{name}.pid"))
            lines.append(f"{airflow} {shlex.join(args)} >{log} 2>&1 &")
            lines.append(f"echo $! >{pid_file}")
        lines.append("wait")
        self.proc = subprocess.Popen(["sh", "-c", "\n".join(lines)], env=self.env(),
                                     cwd=self.home, start_new_session=True,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.pgid = os.getpgid(self.proc.pid)
        assert self.pgid == self.proc.pid, "the stack should lead its own process group"
        wait_for("the shell to start every component",
                 lambda: len(self._components()) == len(COMPONENTS), 10.0, 0.02)

    def _components(self) -> list[int]:
        """The component processes still running (the group leader's children, and the
        components relaunched by this process)."""
        if self.proc is None:
            return []
        parents = {self.proc.pid, os.getpid()}
        relaunched = {p.pid for p in self.relaunched.values() if p.poll() is None}
        return [pid for pid in self.members()
                if parent_of(pid) == self.proc.pid or (parent_of(pid) in parents
                                                     and pid in relaunched)]

    def component_pid(self, name: str) -> int:
        """The pid of component ``name`` (its ``airflow`` process)."""
        if name in self.relaunched:
            return self.relaunched[name].pid
        return int((self.home / f"{name}.pid").read_text())

    def kill(self, name: str) -> list[int]:
        """SIGKILL component ``name`` and every process under it at once, as a machine
        crash would (no clean-up runs: no handler sees a signal it can catch). Returns the
        pids killed, once they are all gone."""
        root = self.component_pid(name)
        tree = [root, *descendants(root)]
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if name in self.relaunched:
            self.relaunched.pop(name).wait(timeout=10)
        self.down.add(name)
        wait_for(f"the killed {name} to disappear",
                 lambda: not set(tree) & set(self.members()), 10.0, 0.02)
        return tree

    def relaunch(self, name: str) -> None:
        """Start component ``name`` again, its output appended to ``<name>.log``. It leads a
        process group of its own (a process cannot join a group of another session), which
        :meth:`members` and :meth:`stop` count as part of the stack."""
        if self.pgid is None:
            raise RuntimeError("the stack is not started")
        self._spawn(name, COMPONENTS[name])
        self.down.discard(name)

    def add_triggerer(self, name: str = "triggerer-2") -> int:
        """Start one more ``airflow triggerer`` beside the stack's own, on the same metadata
        database (Airflow's triggerers share the triggers: each takes unassigned ones as it
        polls). Its output goes to ``<name>.log``; it is stopped with the stack, and
        :meth:`component_pid` and :meth:`kill` know it by ``name``. Returns its pid."""
        return self._add(name, COMPONENTS["triggerer"])

    def add_celery_worker(self, name: str = "worker-1", concurrency: int = 4) -> int:
        """Start one ``airflow celery worker`` (a stack with ``executor="celery"``) reading
        the stack's queue, running at most ``concurrency`` tasks at once (each in a process
        of its pool). Known by ``name`` as :meth:`add_triggerer`'s processes are: its
        output in ``<name>.log``, stopped with the stack, killed with :meth:`kill`.
        ``--without-mingle --without-gossip``: the workers need nothing from each other,
        and a broker shared by several stacks would otherwise have them talk across
        stacks. Returns its pid."""
        if self.executor != "celery":
            raise RuntimeError("a Celery worker needs a stack with executor='celery', "
                               f"not {self.executor!r}")
        if concurrency < 1:
            raise ValueError(f"concurrency: {concurrency} must be at least 1")
        return self._add(name, ["celery", "worker", "--skip-serve-logs",
                                "--queues", self.celery_queue,
                                "--concurrency", str(concurrency),
                                "--celery-hostname", f"{name}@{self.celery_queue}",
                                "--without-mingle", "--without-gossip"])

    def _add(self, name: str, args: list[str]) -> int:
        """Start ``airflow <args>`` as the stack's process ``name`` (a group of its own)."""
        if self.pgid is None:
            raise RuntimeError("the stack is not started")
        if name in COMPONENTS or name in self.relaunched:
            raise ValueError(f"{name!r} is already a component of the stack")
        return self._spawn(name, args)

    def _spawn(self, name: str, args: list[str]) -> int:
        """Popen ``airflow <args>`` in a new session, output appended to ``<name>.log``."""
        log = open(self.home / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
        try:
            self.relaunched[name] = subprocess.Popen(
                [str(self.bin_dir / "airflow"), *args], env=self.env(),
                cwd=self.home, start_new_session=True, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        return self.relaunched[name].pid

    def groups(self) -> list[int]:
        """The stack's process groups: the one started together, and one per relaunch."""
        for relaunched in self.relaunched.values():
            relaunched.poll()  # reap a relaunched leader once it has exited
        return ([self.pgid] if self.pgid is not None else []) + \
            [p.pid for p in self.relaunched.values()]

    def members(self) -> list[int]:
        if self.proc is not None:
            self.proc.poll()  # reap the group leader once it has exited
        return [pid for pgid in self.groups() for pid in group_members(pgid)]

    def stop(self, grace_s: float = 30.0) -> StopReport:
        """SIGTERM the whole group, wait up to ``grace_s`` for it to empty, SIGKILL what is
        left, and report. What exited when, and (if anything needed SIGKILL) what the
        leftovers were doing before it (:func:`diagnose`, the logs' tails), go to
        ``stop.log`` and the report's ``diagnostics``."""
        if self.stopped is not None:
            return self.stopped
        if self.pgid is None:
            return StopReport(0.0, [], [])
        start = time.monotonic()
        members = self.members()
        before = dict(zip(members, describe(members), strict=True))
        for pgid in self.groups():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
        exits: list[str] = []

        def empty() -> bool:
            members = set(self.members())
            for pid in [p for p in before if p not in members]:
                exits.append(f"+{time.monotonic() - start:5.2f} s  exited {before.pop(pid)}")
            return not members

        with contextlib.suppress(TimeoutError):
            wait_for("the stack to exit", empty, grace_s, 0.1)
        term_s = time.monotonic() - start
        leftovers = self.members()
        killed = describe(leftovers) if leftovers else []
        diagnostics, race = self._diagnose(leftovers, term_s) if leftovers else ("", None)
        (self.home / "stop.log").write_text("\n".join([*exits, diagnostics]).rstrip() + "\n")
        if leftovers:
            for pgid in self.groups():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
            with contextlib.suppress(TimeoutError):
                wait_for("the killed group to disappear", lambda: not self.members(), 5.0, 0.05)
        for proc in [self.proc, *self.relaunched.values()]:
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        self.stopped = StopReport(term_s, killed, self.members(), diagnostics, race)
        if self.executor == "celery":
            self._drop_celery_queue()
        return self.stopped

    def _diagnose(self, leftovers: list[int], term_s: float) -> tuple[str, str | None]:
        """What the processes left ``term_s`` after SIGTERM are doing (:func:`diagnose`,
        the tails of their components' logs), and whether it is Airflow's LocalExecutor
        shutdown race (:func:`local_executor_race`)."""
        diagnosis = diagnose(leftovers)
        race = None
        if self.executor == "local" and self.proc is not None:
            race = local_executor_race(diagnosis, self._pid_of("scheduler"), self.proc.pid)
        return "\n".join([
            f"----- still alive {term_s:.1f} s after SIGTERM, before SIGKILL -----",
            *([race] if race else []), render(diagnosis),
            self.read_logs(self._components_of(leftovers), LOG_LINES)]), race

    def _drop_celery_queue(self) -> None:
        """Delete the stack's queue from a Redis broker (its list, priority lists and
        binding): tasks left in it would otherwise stay in the broker's database."""
        if not self.celery_broker_url.startswith(("redis://", "rediss://")):
            return
        import redis

        with redis.Redis.from_url(self.celery_broker_url) as broker:
            keys = [*broker.scan_iter(match=f"{self.celery_queue}*"),
                    f"_kombu.binding.{self.celery_queue}"]
            broker.delete(*keys)

    def alive(self) -> bool:
        """True while every component runs; raises (with the logs' tails) if one has exited,
        so a crash fails fast instead of looking like a slow start or a slow run."""
        if self.proc is None:
            return False
        running = self._components()
        # the components not killed, and the processes added or relaunched since
        expected = len(set(COMPONENTS) - self.down | set(self.relaunched))
        exited = [name for name, proc in self.relaunched.items() if proc.poll() is not None]
        if self.proc.poll() is not None or len(running) < expected or exited:
            raise RuntimeError(f"a component of the stack exited ({len(running)} of "
                               f"{expected} still run; exited: {exited})\n{self.read_logs()}")
        return True

    # -- the REST API ---------------------------------------------------------------------

    def token(self) -> str | None:
        """A JWT for the admin user, or None while the API server is not up yet."""
        if self._token is None:
            try:
                response = httpx.post(f"{self.api_url}/auth/token", timeout=5,
                                      json={"username": "admin",
                                            "password": self.admin_password})
            except httpx.TransportError:
                return None
            if response.status_code >= 500:
                return None
            response.raise_for_status()
            self._token = str(response.json()["access_token"])
        return self._token

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        token = self.token()
        if token is None:
            raise RuntimeError("the API server is not up")
        return httpx.request(method, f"{self.api_url}/api/v2{path}", timeout=10,
                             headers={"Authorization": f"Bearer {token}"}, **kwargs)

    def _components_of(self, pids: list[int]) -> list[str]:
        """The components (and relaunched ones) that ``pids`` belong to, or all of them
        if none does."""
        names = list(dict.fromkeys([*COMPONENTS, *self.relaunched]))
        return [name for name in names if set(pids) & self._tree(name)] or names

    def _pid_of(self, name: str) -> int:
        """:meth:`component_pid`, or -1 where its pid file is missing or unreadable."""
        try:
            return self.component_pid(name)
        except (OSError, ValueError):
            return -1

    def _tree(self, name: str) -> set[int]:
        """Component ``name``'s process and every process below it (empty if unknown)."""
        root = self._pid_of(name)
        return {root, *descendants(root)} if root > 0 else set()

    def read_logs(self, names: Sequence[str] | None = None, lines: int | None = None) -> str:
        """The tail of the logs of ``names`` (default: every component's, and the CLI's),
        for failure messages: each log's last 3,000 characters, or with ``lines``, its last
        ``lines`` lines, each cut to :data:`LOG_LINE_CHARS`."""
        parts = []
        for name in dict.fromkeys(names if names is not None
                                  else [*COMPONENTS, *self.relaunched, "cli"]):
            path = self.home / f"{name}.log"
            if not path.exists():
                continue
            if lines is None:
                text = path.read_text(errors="replace")
                parts.append(f"----- {name}.log (tail) -----\n{text[-3000:]}")
            else:
                parts.append(f"----- {name}.log (last {lines} lines) -----\n"
                             f"{log_tail(path, lines, LOG_LINE_CHARS)}")
        return "\n".join(parts)
