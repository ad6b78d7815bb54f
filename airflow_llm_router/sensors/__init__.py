"""Sensors: wait for backlog and capacity, then hand on the router's advice."""

from __future__ import annotations

from airflow_llm_router.sensors.backpressure import BackpressureSensor

__all__ = ["BackpressureSensor"]
