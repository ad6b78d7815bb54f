"""``llm-router quotas``: the quota store's command line, for deploy scripts.

    llm-router quotas load quotas.yaml [--prune] [--conn-id ...]
    llm-router quotas migrate
    llm-router quotas list
    llm-router quotas budget [--set MICRO_USD [--period-s S] | --clear]

Connections and tables default to the ``[llm_router]`` Airflow config (see
:class:`~airflow_llm_router.quotas.config.QuotaConfig`). Exit status 2 for invalid input
(nothing written) and for every other failure (a missing connection, PostgreSQL or Redis
unreachable: nothing written), always as one ``error:`` line that says what to fix. Log
lines go to standard error, the output to standard output.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Sequence
from dataclasses import replace

from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_llm_router.cli_parser import CliParser, logs_to_stderr
from airflow_llm_router.engine.quota import RouterBudget
from airflow_llm_router.exceptions import QuotaStoreError, QuotaValidationError
from airflow_llm_router.hooks.router import RouterHook
from airflow_llm_router.quotas.config import QuotaConfig
from airflow_llm_router.quotas.loader import read_quota_file

__all__ = ["main"]


def _parser(config: QuotaConfig | None = None) -> argparse.ArgumentParser:
    """The parser; its help shows the defaults ``config`` (the ``[llm_router]`` options)
    gives."""
    d = config or QuotaConfig()
    parser = CliParser(
        prog="llm-router quotas",
        description="Manage the LLM router's durable quotas. Defaults come from the "
        "[llm_router] section of the Airflow config.")
    parser.add_argument("--conn-id", help="the llm_router connection (Redis) "
                        f"(default: {d.router_conn_id})")
    parser.add_argument("--postgres-conn-id", help="the PostgreSQL connection "
                        f"(default: {d.postgres_conn_id})")
    parser.add_argument("--schema", help=f"schema of the quota table (default: {d.schema})")
    parser.add_argument("--table", help=f"name of the quota table (default: {d.table})")
    commands = parser.add_subparsers(dest="command", required=True)
    load = commands.add_parser("load", help="validate a YAML/JSON file and apply it at once")
    load.add_argument("file", help="YAML or JSON: model names to quotas, at the top level "
                      "or under models")
    load.add_argument("--prune", action="store_true",
                      help="also delete stored quotas of models the file does not name")
    load.add_argument("--actor", default=f"cli:{getpass.getuser()}",
                      help="name recorded in the audit log (default: %(default)s)")
    commands.add_parser("migrate", help="create or upgrade the quota tables")
    commands.add_parser("list", help="print the stored quotas as JSON")
    budget = commands.add_parser(
        "budget", help="print the router-wide spend budget as JSON, or set or remove it")
    change = budget.add_mutually_exclusive_group()
    change.add_argument("--set", type=int, metavar="MICRO_USD", dest="budget_micro_usd",
                        help="what every priced model may spend together per period, "
                        "in micro-dollars ($1 = 1000000)")
    change.add_argument("--clear", action="store_true", help="remove the budget")
    budget.add_argument("--period-s", type=float, dest="budget_period_s",
                        help="with --set: the period in seconds, aligned to multiples of it "
                        "since the Unix epoch (default: 86400, a UTC day)")
    budget.add_argument("--actor", default=f"cli:{getpass.getuser()}",
                        help="name recorded in the audit log (default: %(default)s)")
    return parser


def _budget(args: argparse.Namespace, config: QuotaConfig) -> None:
    """Show the stored budget, or set or remove it (stored, audited, pushed to Redis)."""
    if args.budget_period_s is not None and args.budget_micro_usd is None:
        raise QuotaValidationError("--period-s: only with --set (give the budget too)")
    if args.budget_micro_usd is None and not args.clear:
        record = config.open_store(None).budget_record()
        print(json.dumps(None if record is None else {
            **record.budget.model_dump(), "updated_at": record.updated_at.isoformat(),
            "updated_by": record.updated_by}, indent=2))
        return
    new = None if args.clear else RouterBudget.parse(
        {k: v for k, v in vars(args).items()
         if k in ("budget_micro_usd", "budget_period_s") and v is not None})
    router = RouterHook(config.router_conn_id).client
    store = config.open_store(router)
    store.migrate()
    change = store.set_budget(new, actor=args.actor, source="cli")
    print(f"{change.action:8} router-wide budget: "
          f"{'none' if change.new is None else change.new.model_dump()}")


def _config(args: argparse.Namespace, config: QuotaConfig) -> QuotaConfig:
    chosen = {"router_conn_id": args.conn_id, "postgres_conn_id": args.postgres_conn_id,
              "schema": args.schema, "table": args.table}
    return replace(config, **{k: v for k, v in chosen.items() if v})


def main(argv: Sequence[str] | None = None) -> int:
    logs_to_stderr()  # standard output holds the changes, the list, the budget: nothing else
    defaults = QuotaConfig.from_airflow()
    args = _parser(defaults).parse_args(argv)
    config = _config(args, defaults)
    try:
        if args.command == "load":
            quotas = read_quota_file(args.file)  # validated before any connection is made
            router = RouterHook(config.router_conn_id).client
            store = config.open_store(router)
            store.migrate()
            changes = store.load(quotas, actor=args.actor, source="file", prune=args.prune)
            for change in changes:
                print(f"{change.action:8} {change.model}")
            print(f"{len(changes)} change(s); {len(quotas)} model(s) in {args.file}")
        elif args.command == "budget":
            _budget(args, config)
        elif args.command == "migrate":
            print(f"quota tables at version {config.open_store(None).migrate()}")
        else:
            records = config.open_store(None).records()
            print(json.dumps({r.model: r.quota.model_dump() for r in records}, indent=2))
    except QuotaValidationError as err:
        if len(err.problems) > 1:  # a quota file: one problem per line, then the verdict
            for problem in err.problems:
                print(problem, file=sys.stderr)
            return _fail(f"{args.file}: {len(err.problems)} problems (above); nothing was "
                         "loaded")
        return _fail(str(err))
    except QuotaStoreError as err:
        return _fail(str(err))
    except AirflowNotFoundException as err:
        return _fail(f"{err}: add the connection (airflow connections add ...) or name "
                     "another one with --conn-id / --postgres-conn-id")
    except Exception as err:  # one line, never a traceback
        return _fail(f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    return 0


def _fail(message: str) -> int:
    """One ``error:`` line, also for a driver's message on several lines (psycopg adds its
    hint on a second one)."""
    one_line = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    print(f"error: {one_line}", file=sys.stderr)
    return 2
