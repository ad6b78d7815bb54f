"""Hooks: the router (Redis) and the Models Backend (HTTP)."""
