"""What the benchmarks share: their sections of ``docs/benchmarks.md`` and clean-up."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from llm_router_devkit import redis_tools

__all__ = ["drop_namespace", "drop_schema", "guarded", "publish", "write_section"]


def write_section(path: Path, heading: str, text: str) -> None:
    """Replace the section that starts with ``heading`` (up to the next ``## `` heading) by
    ``text``, or append it: each benchmark rewrites only its own section."""
    body = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.M | re.S)
    section = text.rstrip() + "\n\n"
    if pattern.search(body):
        body = pattern.sub(lambda _: section, body, count=1)
    else:
        body = body.rstrip() + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body.rstrip() + "\n")


def drop_namespace(redis_url: str, namespace: str) -> None:
    """Delete every key of a router namespace (a benchmark's own, made for one run)."""
    redis_tools.drop_namespace(redis_url, namespace)


def publish(text: str, heading: str, out: Path, write: bool) -> None:
    """Print a benchmark's section and, if ``write``, put it in ``out``."""
    print()
    print(text)
    if write:
        write_section(out, heading, text)
        print(f"wrote {out}")


def drop_schema(dsn: str, schema: str) -> None:
    """Drop a PostgreSQL schema a benchmark made for one run, with everything in it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def guarded(body: Callable[[], int]) -> int:
    """Run a benchmark's ``main`` body: Ctrl-C ends it with status 130 (its services are
    stopped by their context managers), any other failure with one ``error:`` line and
    status 2, never a traceback."""
    try:
        return body()
    except KeyboardInterrupt:
        print("\ninterrupted; services stopped", file=sys.stderr)
        return 130
    except Exception as err:
        print(f"error: {type(err).__name__}: {err}".splitlines()[0], file=sys.stderr)
        return 2
