"""The blocking router client, for hooks, workers and command lines."""

from __future__ import annotations

import time
from typing import Any, TypeVar

import redis
from redis.cluster import ClusterPubSub

from airflow_llm_router.engine.api import RouterAPI, SyncDriver, single_decision
from airflow_llm_router.engine.connect import sync_redis, target_from_url
from airflow_llm_router.engine.core import RouterCore
from airflow_llm_router.engine.failover import watch_master
from airflow_llm_router.engine.restore import LoadQuotas, QuotaSource, Steps
from airflow_llm_router.engine.scripts import OPERATIONS, script_source
from airflow_llm_router.engine.slots import SlotRetry, refused_by_migration
from airflow_llm_router.engine.steps import Command, Script
from airflow_llm_router.engine.types import Admission, AdmitRequest, RouterSettings

__all__ = ["RouterClient"]

R = TypeVar("R")


class RouterClient(RouterAPI, SyncDriver):
    """Blocking client over a ``redis.Redis`` connection."""

    def __init__(self, client: redis.Redis, settings: RouterSettings | None = None, *,
                 quota_source: QuotaSource | None = None) -> None:
        self.redis = client
        self.core = RouterCore(settings or RouterSettings())
        if isinstance(client, redis.RedisCluster):
            self.core.check_cluster()
        self.quota_source = quota_source
        watch_master(client, self.core)
        self._scripts = {op: client.register_script(script_source(op)) for op in OPERATIONS}

    @classmethod
    def from_url(cls, url: str, settings: RouterSettings | None = None, *,
                 quota_source: QuotaSource | None = None) -> RouterClient:
        """A client for one node, a cluster or a Sentinel-watched master (the URL forms are
        in :mod:`~airflow_llm_router.engine.connect`)."""
        return cls(sync_redis(target_from_url(url)), settings, quota_source=quota_source)

    def _drive(self, step: Steps[R]) -> R:
        reply: Any = None
        try:
            while True:
                reply = self._run(step.send(reply))
        except StopIteration as done:
            result: R = done.value
            return result

    def _run(self, action: Script | Command | LoadQuotas) -> Any:
        if isinstance(action, Command):
            return self.redis.execute_command(*action.args)
        if isinstance(action, LoadQuotas):
            return self._load_quotas()
        keys, args = self.core.script_keys(action), [self.core.settings_arg, *action.argv()]
        wait = self.core.wait_args(action.op)
        if wait is None:
            retry = SlotRetry(action.op, self.core.settings.namespace)
            while True:
                try:
                    return self._scripts[action.op](keys=keys, args=args)
                except redis.RedisError as err:
                    if not refused_by_migration(err):
                        raise
                    time.sleep(retry.pause(err))
        # the WAIT must follow the script on the same connection: one pipeline
        pipe = self.redis.pipeline(transaction=False)
        self._scripts[action.op](keys=keys, args=args, client=pipe)
        pipe.execute_command(*wait)
        reply, acked = pipe.execute()
        self.core.replicated(action.op, acked)
        return reply

    def wait_for_admission(self, request: AdmitRequest, timeout_s: float) -> Admission | None:
        """Block until ``request`` is admitted (None after ``timeout_s``), waking on releases.

        :raises ImpossibleRequestError: no allowed model could ever admit it.
        """
        deadline = time.monotonic() + timeout_s
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        sharded = self.sharded_pubsub()
        if sharded:
            pubsub.ssubscribe(self.core.keys.released_channel)
        else:
            pubsub.subscribe(self.core.keys.released_channel)
        # a cluster client reads sharded messages per node
        read = (pubsub.get_sharded_message if sharded and isinstance(pubsub, ClusterPubSub)
                else pubsub.get_message)
        try:
            while True:
                decision = single_decision(self.admit_many([request])[0])
                if isinstance(decision, Admission):
                    return decision
                left = deadline - time.monotonic()
                if left <= 0:
                    self.cancel([request.request_id])
                    return None
                read(timeout=min(left, decision.retry_after_ms / 1000))
        finally:
            pubsub.close()


    def close(self) -> None:
        self.redis.close()
