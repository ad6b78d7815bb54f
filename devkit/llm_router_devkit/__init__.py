"""airflow-llm-router devkit: simulator, demo, real-stack harness (never production)."""
