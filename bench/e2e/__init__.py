"""End-to-end benchmark: the as-is design against the router and the capacity bound, through
the real Airflow scheduler and triggerer (``python -m bench.e2e``; see docs/benchmarks.md)."""
