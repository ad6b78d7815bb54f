"""Admission engine benchmark: decisions per second and latency of one admission call.

Runs, against a live Redis, the matrix

    client (sync threads | asyncio coroutines) x callers (1, 16, 256)
    x models (10, 100) x mode (single ``admit`` | batched ``admit_many`` of 64)

Each caller loops admit -> complete (``complete_many`` for a batch) for a fixed time per
cell. Quotas are far above what the run can use, and requests allow any model, so every
call runs the weighted-fair selection over all models and is admitted: this measures the
cost of a decision, not waiting. Only admissions count in the rate; latency is measured
per admit call with ``time.perf_counter()`` (a batched call's latency is also reported
divided by its admissions). Redis server cost comes from ``INFO commandstats`` (time in
EVALSHA, and the ``redis.call()`` commands the scripts ran) and ``INFO cpu`` deltas.

Two extra checks: the cost of a decision at rpm=1,000 vs rpm=1,000,000 (60 s window, so
the window log holds many entries), and a sequential, one-caller breakdown of where Redis
time goes per operation.

    python -m bench.admission                   # full matrix (~3 s per cell), writes docs
    python -m bench.admission --quick           # ~1 s per cell
    python -m bench.admission --profile         # + cProfile of the client side

Every cell uses its own namespace, and its keys are deleted (SCAN + UNLINK) afterwards.
"""
