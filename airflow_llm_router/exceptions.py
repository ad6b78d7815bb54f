"""Errors raised by airflow-llm-router; each names what was wrong and how to fix it."""

from __future__ import annotations

__all__ = [
    "ConnectionConfigError",
    "ImpossibleRequestError",
    "LeaseNotFoundError",
    "ModelNameError",
    "QuotaNotFoundError",
    "QuotaStoreError",
    "QuotaValidationError",
    "ReplicationLagError",
    "RouterError",
    "SlotMigrationError",
    "TaskStoreError",
    "TaskValidationError",
]


class RouterError(Exception):
    """Base class of every error this package raises on purpose."""


class QuotaValidationError(RouterError, ValueError):
    """A quota value is out of range or of the wrong type.

    ``problems``: each problem on its own (``<field>: <why> (<fix>)``, with the model in
    front for a quota file), for callers that list them one per line; the message holds
    them all.
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems: list[str] = list(problems) if problems else [message]


class ImpossibleRequestError(RouterError):
    """No allowed model could ever admit the request (unknown, disabled or too large)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class LeaseNotFoundError(RouterError):
    """The lease is unknown: it expired and was reclaimed, or it was already completed."""


class TaskStoreError(RouterError):
    """The task store could not carry out a request."""


class TaskStoreSetupError(TaskStoreError):
    """The task store cannot work as it is set up (a newer schema, a missing privilege):
    retrying will not help, an operator has to act on the message."""


class TaskStoreUnavailable(TaskStoreError):
    """The task store's server could not be reached, or its connection broke (a restart, a
    failover, the network); nothing of the call was committed unless the break came with
    the commit. A drain retries it for ``DrainSettings.store_outage_s``."""


class TaskValidationError(TaskStoreError, ValueError):
    """An argument to the task store is invalid; ``field`` names it and the message the fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class ModelNameError(QuotaValidationError, TaskValidationError):
    """A model name breaks the rule of ``names.MODEL_NAME_RE`` (engine and store alike)."""

    def __init__(self, field: str, message: str) -> None:
        TaskValidationError.__init__(self, field, message)
        self.problems = [str(self)]


class QuotaStoreError(RouterError):
    """The quota store could not carry out a change; nothing of it was applied."""


class QuotaNotFoundError(QuotaStoreError, KeyError):
    """The model has no quota to patch or delete."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ConnectionConfigError(RouterError, ValueError):
    """An Airflow connection of the provider holds a value it cannot use; the message names
    the connection, the field and the fix (never the connection's secrets)."""

    def __init__(self, conn_id: str, field: str, message: str) -> None:
        super().__init__(f"connection {conn_id!r}: {field}: {message}")
        self.conn_id = conn_id
        self.field = field


class ReplicationLagError(RouterError, ConnectionError):
    """With ``RouterSettings.replicas_to_wait``, a write (an admission, a quota change) that
    fewer replicas than asked acknowledged in time: the master may be cut off from them (a
    failover in progress), and a failover would lose it. Its admissions are not handed out;
    retry, as for a lost connection (the clients ask Sentinel again on the next refusal).
    """


class SlotMigrationError(RouterError, ConnectionError):
    """Redis Cluster kept refusing a router script (``TRYAGAIN``) for longer than the
    client waits: the namespace's slot is being migrated between nodes and the move did not
    finish in time (or was left half done: ``redis-cli --cluster fix`` completes it).
    Nothing of the refused call was applied; retry, as for a lost connection."""
