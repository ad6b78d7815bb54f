"""The SQL of the operators' view of the backlog: summary, dead letters, requeue and its log.

Kept apart from :mod:`.queries` (the claim cycle's statements): these run only when a person
or the API asks, and are composed on first use (:class:`~.admin.BacklogAdmin`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from psycopg import sql

from airflow_llm_router.pg import TableNames

# --- the backlog as operators see it: summary, dead letters, requeue -------------------------
# Each statement reads a bounded number of index entries: per status at most a cap of rows
# (COUNT_CAP), the solved tasks of the last few minutes, one page of dead tasks.

def requeue_log_table(names: TableNames) -> sql.Identifier:
    """``<schema>.<table>_requeues``: who requeued which dead tasks, when (the audit of
    :meth:`BacklogAdmin.requeue`), named by the index rule so a long table name still fits."""
    name = f"{names.table}_requeues"
    if len(name) > 63:  # PostgreSQL would cut it silently: keep a digest of the full name
        name = f"{names.table[:44]}_{hashlib.sha1(names.table.encode()).hexdigest()[:8]}_requeues"
    return sql.Identifier(names.schema, name)


# Tasks per status and lane, each status counted up to %(cap)s rows from its partial index.
_STATUS_COUNTS = """
SELECT c.status, c.priority_rank, count(*) FROM (
    (SELECT 'pending' AS status, priority_rank FROM {tasks} WHERE status = 'pending' LIMIT %(cap)s)
    UNION ALL
    (SELECT 'claimed', priority_rank FROM {tasks} WHERE status = 'claimed' LIMIT %(cap)s)
    UNION ALL
    (SELECT 'solved', priority_rank FROM {tasks} WHERE status = 'solved' LIMIT %(cap)s)
    UNION ALL
    (SELECT 'dead', priority_rank FROM {tasks} WHERE status = 'dead' LIMIT %(cap)s)
) AS c
GROUP BY c.status, c.priority_rank
"""

# The first task of each lane in claim order (two index probes), its age by enqueue time,
# and the tasks solved over the last %(window)s seconds (a range of the solved index).
_PENDING_AGE_AND_RATE = """
SELECT (SELECT extract(epoch FROM now() - min(o.created_at))::float8 FROM (
            (SELECT created_at FROM {tasks} WHERE status = 'pending' AND priority_rank = 0
              ORDER BY priority_rank, id LIMIT 1)
            UNION ALL
            (SELECT created_at FROM {tasks} WHERE status = 'pending' AND priority_rank = 1
              ORDER BY priority_rank, id LIMIT 1)) AS o),
       (SELECT count(*) FROM {tasks}
         WHERE status = 'solved' AND solved_at > now() - make_interval(secs => %(window)s))
"""

# Which dead tasks a list or requeue means; a NULL parameter is no condition.
_DEAD_FILTER = """
t.status = 'dead'
AND (%(kind)s::text IS NULL OR t.kind = %(kind)s::text)
AND (%(model)s::text IS NULL OR t.model = %(model)s::text
     OR %(model)s::text = ANY(t.allowed_models))
AND (%(error)s::text IS NULL OR strpos(lower(t.last_error), lower(%(error)s::text)) > 0)
"""

# Newest first from the dead index; never the prompt, the error cut to %(chars)s.
_DEAD_PAGE = """
SELECT t.id, t.kind, t.priority, t.attempts, t.max_attempts, left(t.last_error, %(chars)s),
       t.model, t.allowed_models, t.created_at, t.updated_at
  FROM {tasks} AS t
 WHERE {dead_filter}
 ORDER BY t.updated_at DESC, t.id DESC
 LIMIT %(limit)s OFFSET %(offset)s
"""

_DEAD_COUNT = """
SELECT count(*) FROM (SELECT 1 FROM {tasks} AS t WHERE {dead_filter} LIMIT %(cap)s) AS c
"""

# A requeued task starts afresh: pending, no attempts used, no claim (its old claim token is
# gone, so a late writer of an earlier attempt stays fenced out); last_error stays, saying
# why it died, until a new failure replaces it.
_REQUEUE_SET = """
   SET status = 'pending', attempts = 0, claim_token = NULL, claimed_by = NULL,
       claim_expires_at = NULL, updated_at = now()
"""

_REQUEUE_IDS = """
UPDATE {tasks} AS t {requeue_set}
 WHERE t.id = ANY(%(ids)s::bigint[]) AND t.status = 'dead'
RETURNING t.id
"""

# Oldest dead first, a bounded batch; rows another session holds are left for the next call.
_REQUEUE_FILTER = """
WITH picked AS (
    SELECT t.id FROM {tasks} AS t
     WHERE {dead_filter}
     ORDER BY t.updated_at, t.id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE {tasks} AS t {requeue_set}
  FROM picked
 WHERE t.id = picked.id
RETURNING t.id
"""

_REQUEUE_LOG = """
INSERT INTO {log} (actor, source, request, requeued, skipped, remaining)
VALUES (%(actor)s, %(source)s, %(request)s::jsonb, %(requeued)s, %(skipped)s, %(remaining)s)
RETURNING id
"""

_REQUEUE_LOG_READ = """
SELECT id, at, actor, source, request, requeued, skipped, remaining
  FROM {log} ORDER BY id DESC LIMIT %(limit)s
"""


@dataclass(frozen=True)
class BacklogQueries:
    """The statements of the backlog summary, the dead-letter list and requeue."""

    status_counts: sql.Composed
    pending_age_and_rate: sql.Composed
    dead_page: sql.Composed
    dead_count: sql.Composed
    requeue_ids: sql.Composed
    requeue_filter: sql.Composed
    requeue_log: sql.Composed
    requeue_log_read: sql.Composed

    @classmethod
    def build(cls, names: TableNames) -> BacklogQueries:
        parts = {"tasks": names.tasks, "log": requeue_log_table(names),
                 "dead_filter": sql.SQL(_DEAD_FILTER), "requeue_set": sql.SQL(_REQUEUE_SET)}
        templates = {
            "status_counts": _STATUS_COUNTS, "pending_age_and_rate": _PENDING_AGE_AND_RATE,
            "dead_page": _DEAD_PAGE, "dead_count": _DEAD_COUNT, "requeue_ids": _REQUEUE_IDS,
            "requeue_filter": _REQUEUE_FILTER, "requeue_log": _REQUEUE_LOG,
            "requeue_log_read": _REQUEUE_LOG_READ,
        }
        return cls(**{name: sql.SQL(template).format(**parts)
                      for name, template in templates.items()})
