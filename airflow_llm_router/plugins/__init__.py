"""The Airflow plugin: registers the HTTP surface and serves the quota page."""
