"""The SQL of the task store, composed once per table with safely quoted identifiers.

Every write that takes a claim token is *fenced*: it matches ``claim_token = <token>`` on a
claimed row (or one whose expired claim went back to pending and was not claimed again), so
a worker whose claim was taken over can no longer touch the row.
Bulk writes pass parallel arrays through ``unnest`` so a chunk is one statement and one
round trip, however many tasks it holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from airflow_llm_router.pg import TableNames

#: Columns of a claimed task, in :class:`~airflow_llm_router.store.records.ClaimedTask` order.
CLAIMED_COLUMNS = (
    "t.id, t.prompt, t.kind, t.priority, t.allowed_models, t.attempts, t.max_attempts, "
    "t.claim_token::text, t.metadata, t.on_budget"
)

#: Columns of a full row, in :class:`~airflow_llm_router.store.records.TaskRow` order.
ROW_COLUMNS = (
    "t.id, t.prompt, t.kind, t.priority, t.allowed_models, t.status, t.attempts, "
    "t.max_attempts, t.claim_token::text, t.claimed_by, t.claim_expires_at, t.answer, t.model, "
    "t.input_tokens, t.output_tokens, t.last_error, t.created_at, t.updated_at, t.solved_at, "
    "t.metadata, t.on_budget"
)

#: Most expired claims one reclaim statement returns to pending (or dead-letters), for the
#: claim cycle and the watcher alike; a claim of ``n`` returns at least ``n``, the next
#: call returns more.
RECLAIM_BATCH = 1000

_CLEAR_CLAIM = "claim_token = NULL, claimed_by = NULL, claim_expires_at = NULL, updated_at = now()"

# One row per task from parallel arrays; each task's model list travels as an array literal
# (arrays of lists of different lengths do not exist in PostgreSQL). A task whose key is
# already in the table is skipped (ON CONFLICT waits for a concurrent inserter of the same
# key to commit or roll back); _ENQUEUE_KEYS then finds its id in the same transaction.
_ENQUEUE = """
INSERT INTO {tasks} (prompt, kind, priority, allowed_models, max_attempts, metadata,
                     idempotency_key, on_budget)
SELECT u.prompt, u.kind, u.priority, u.models::text[], u.max_attempts, u.metadata::jsonb,
       u.idempotency_key, u.on_budget
  FROM unnest(%(prompts)s::text[], %(kinds)s::text[], %(priorities)s::text[],
              %(allowed_models)s::text[], %(max_attempts)s::int[], %(metadata)s::text[],
              %(keys)s::text[], %(on_budget)s::text[])
       WITH ORDINALITY AS u(prompt, kind, priority, models, max_attempts, metadata,
                            idempotency_key, on_budget, ord)
 ORDER BY u.ord
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, idempotency_key
"""

# A statement of its own, so under READ COMMITTED it sees a concurrent enqueue's committed
# row that made _ENQUEUE skip a key.
_ENQUEUE_KEYS = """
SELECT idempotency_key, id FROM {tasks} WHERE idempotency_key = ANY(%s::text[])
"""

# Expired claims go back to pending, a bounded batch at a time, oldest expiry first; those
# that used their last attempt are dead-lettered instead (handing them out again would be an
# attempt too many). A returned row keeps its claim token and owner (claim_expires_at is
# cleared, so it is no longer "claimed"): until someone claims it again, its worker's late
# answer or heartbeat still matches. Rows another session has locked are left for later.
_RECLAIM = """
WITH expired AS (
    SELECT id FROM {tasks}
     WHERE status = 'claimed' AND claim_expires_at < now()
     ORDER BY claim_expires_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE {tasks} AS t
   SET status = CASE WHEN t.attempts >= t.max_attempts THEN 'dead' ELSE 'pending' END,
       last_error = CASE WHEN t.attempts >= t.max_attempts THEN format(
           'claims expired: attempt %%s of %%s (by %%s) ended without a result '
           'and no attempts are left', t.attempts, t.max_attempts,
           coalesce(t.claimed_by, 'unknown'))
           || coalesce('; previous error: ' || left(t.last_error, 2000), '')
           ELSE t.last_error END,
       claim_token = CASE WHEN t.attempts >= t.max_attempts THEN NULL ELSE t.claim_token END,
       claimed_by = CASE WHEN t.attempts >= t.max_attempts THEN NULL ELSE t.claimed_by END,
       claim_expires_at = NULL,
       updated_at = now()
  FROM expired
 WHERE t.id = expired.id
RETURNING t.id, t.status
"""

# One index scan that stops after n rows, hot lane first, then oldest. Expired claims were
# returned to pending by _RECLAIM earlier in the same transaction, so they queue here by
# their lane and age. Rows locked by another claimer are skipped, never waited for.
_CLAIM = """
WITH picked AS (
    SELECT id FROM {tasks}
     WHERE status = 'pending'
     ORDER BY priority_rank, id
     LIMIT %(n)s
       FOR UPDATE SKIP LOCKED
)
UPDATE {tasks} AS t
   SET status = 'claimed',
       claim_token = gen_random_uuid(),
       attempts = t.attempts + 1,
       claimed_by = %(worker_id)s,
       claim_expires_at = now() + make_interval(secs => %(ttl)s),
       updated_at = now()
  FROM picked
 WHERE t.id = picked.id
RETURNING {columns}, t.priority_rank
"""

# A restarted worker takes back its own live claims (same worker id: the same task instance
# try), keeping their tokens and attempts: its in-flight calls' leases carry those tokens.
_ADOPT = """
UPDATE {tasks} AS t
   SET claim_expires_at = now() + make_interval(secs => %(ttl)s),
       updated_at = now()
 WHERE t.status = 'claimed' AND t.claimed_by = %(worker_id)s
RETURNING {columns}, t.priority_rank
"""

# A claim token is current while the row is claimed with it, and also after its claim expired
# and _RECLAIM put the row back in pending, until the next claim replaces the token.
_CURRENT = "t.status IN ('claimed', 'pending') AND t.claim_token = r.token"

_COMPLETE = """
UPDATE {tasks} AS t
   SET status = 'solved', answer = r.answer, model = r.model,
       input_tokens = r.input_tokens, output_tokens = r.output_tokens,
       solved_at = now(), {clear_claim}
  FROM unnest(%s::bigint[], %s::uuid[], %s::text[], %s::text[], %s::int[], %s::int[])
       AS r(id, token, answer, model, input_tokens, output_tokens)
 WHERE t.id = r.id AND {current}
RETURNING t.id
"""

_FAIL = """
UPDATE {tasks} AS t
   SET status = CASE WHEN r.retryable AND t.attempts < t.max_attempts
                     THEN 'pending' ELSE 'dead' END,
       last_error = r.error, model = coalesce(r.model, t.model), {clear_claim}
  FROM unnest(%s::bigint[], %s::uuid[], %s::text[], %s::boolean[], %s::text[])
       AS r(id, token, error, retryable, model)
 WHERE t.id = r.id AND {current}
RETURNING t.id, t.status
"""

_RELEASE = """
UPDATE {tasks} AS t
   SET status = 'pending', attempts = greatest(t.attempts - 1, 0), {clear_claim}
  FROM unnest(%s::bigint[], %s::uuid[]) AS r(id, token)
 WHERE t.id = r.id AND {current}
RETURNING t.id
"""

_EXTEND = """
UPDATE {tasks} AS t
   SET status = 'claimed', claim_expires_at = now() + make_interval(secs => %s), updated_at = now()
  FROM unnest(%s::bigint[], %s::uuid[]) AS r(id, token)
 WHERE t.id = r.id AND {current}
RETURNING t.id
"""

# What the claim cycle reads must come from its indexes in order, stopping after n rows:
# the planner picks that plan from the table's statistics, and without them (a table
# filled faster than autovacuum analyzes it: a big enqueue claimed within the minute) it
# guessed a few hundred pending rows, gathered every pending row by bitmap and sorted them
# (237 ms a claim at 100,000 pending where the index takes about 1 ms; ten times that at a
# million). Turned off for the claim cycle's transaction only, the index plans are what is
# left; nothing it runs needs a sequential or bitmap scan.
_INDEX_PLANS = (
    "SELECT set_config('enable_seqscan', 'off', true), "
    "set_config('enable_bitmapscan', 'off', true)"
)

_COUNTS = "SELECT status, count(*) FROM {tasks} GROUP BY status"

# Both counts are answered from the partial indexes; solved and dead rows are never read.
# Pending tasks are counted up to %(cap)s entries of the claim index (NULL: all of them):
# counting them all costs in proportion to the backlog (80 ms a count at 100,000 pending
# on a loaded 2-core machine), and a drain reports its backlog up to ten times a second.
_BACKLOG = """
SELECT (SELECT count(*) FROM (SELECT 1 FROM {tasks} WHERE status = 'pending'
                               LIMIT %(cap)s) AS p)
     + (SELECT count(*) FROM {tasks} WHERE status = 'claimed' AND claim_expires_at < now())
"""

# Live claims (others still working) and the earliest expiry among them; from the index.
_LIVE_CLAIMS = """
SELECT count(*), min(claim_expires_at),
       extract(epoch FROM min(claim_expires_at) - now())::float8
  FROM {tasks}
 WHERE status = 'claimed' AND claim_expires_at >= now()
"""

# Seconds until the earliest claim expires (negative: one already has); NULL with no claims.
_NEXT_EXPIRY = """
SELECT extract(epoch FROM min(claim_expires_at) - now())::float8
  FROM {tasks}
 WHERE status = 'claimed'
"""

_GET = "SELECT {columns} FROM {tasks} AS t WHERE t.id = %s"


@dataclass(frozen=True)
class Queries:
    """All statements of one task store, composed for its schema and table."""

    enqueue: sql.Composed
    enqueue_keys: sql.Composed
    notify: sql.SQL
    index_plans: sql.SQL
    reclaim: sql.Composed
    claim: sql.Composed
    adopt: sql.Composed
    complete: sql.Composed
    fail: sql.Composed
    release: sql.Composed
    extend: sql.Composed
    counts: sql.Composed
    backlog: sql.Composed
    live_claims: sql.Composed
    next_expiry: sql.Composed
    get: sql.Composed

    @classmethod
    def build(cls, names: TableNames) -> Queries:
        def compose(template: str) -> sql.Composed:
            return sql.SQL(template).format(
                tasks=names.tasks,
                clear_claim=sql.SQL(_CLEAR_CLAIM),
                current=sql.SQL(_CURRENT),
                columns=sql.SQL(CLAIMED_COLUMNS if template in (_CLAIM, _ADOPT)
                                else ROW_COLUMNS),
            )

        return cls(
            enqueue=compose(_ENQUEUE),
            enqueue_keys=compose(_ENQUEUE_KEYS),
            notify=sql.SQL("SELECT pg_notify(%s, %s)"),
            index_plans=sql.SQL(_INDEX_PLANS),
            reclaim=compose(_RECLAIM),
            claim=compose(_CLAIM),
            adopt=compose(_ADOPT),
            complete=compose(_COMPLETE),
            fail=compose(_FAIL),
            release=compose(_RELEASE),
            extend=compose(_EXTEND),
            counts=compose(_COUNTS),
            backlog=compose(_BACKLOG),
            live_claims=compose(_LIVE_CLAIMS),
            next_expiry=compose(_NEXT_EXPIRY),
            get=compose(_GET),
        )

