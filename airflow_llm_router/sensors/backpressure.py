"""BackpressureSensor: wait for backlog and capacity, then hand on the router's advice."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from airflow_llm_router.hooks.router import RouterHook
from airflow_llm_router.solver.upkeep import BACKLOG_REPORT_CAP
from airflow_llm_router.store import TaskStore
from airflow_llm_router.triggers.backlog import BackpressureTrigger

__all__ = ["BackpressureSensor"]


class BackpressureSensor(BaseSensorOperator):
    """Waits until the task store has a backlog and the router has an enabled model, then
    returns the router's advice (:meth:`Advice.to_dict`) as its XCom: ``solvers`` is the
    number of solver instances that saturate the quotas (enough calls in flight to send each
    model's window quota at once, or Little's law when the model is slower than its window;
    capped by the backlog and ``max_solvers``), with per-model rates, binding limits and
    the backpressure score.

    Deferrable by default: it checks once in the worker (which also creates the store's
    table on a first deployment) and, if it has to wait, waits in the triggerer
    (:class:`BackpressureTrigger`), woken within milliseconds by an enqueue's notification
    and re-reading the quotas every ``poke_interval``. ``deferrable=False`` pokes from a
    worker instead (``mode="reschedule"`` frees the slot between pokes). A check costs one
    indexed count in PostgreSQL and, only when there is backlog, one stats call to the router.

    :param router_conn_id: the router's ``llm_router`` connection.
    :param postgres_conn_id: the PostgreSQL connection of the task store.
    :param store_schema: schema of the task store.
    :param store_table: table of the task store.
    :param per_solver_in_flight: model calls one solver keeps in flight (its
        ``max_in_flight``).
    :param max_solvers: the most solvers to advise.
    :param input_tokens_per_call: input tokens assumed per call for a model with no
        request in its current window (before the first calls of a drain).
    :param deferrable: wait in the triggerer (default) rather than in a worker.
    :param solver_kwargs: when given, the XCom is instead the list to map the solvers over
        (``SolveTaskOperator.partial(...).expand_kwargs(sensor.output)``): one copy of these
        kwargs per solver, as many as the advice says (or ``fan_out``); the advice itself
        is then the XCom ``advice``. Saves a planning task, so a drain starts sooner.
    :param fan_out: with ``solver_kwargs``, this many solvers whatever the advice (0: as
        many as advised).
    :param lead_solvers: with ``solver_kwargs``, solvers the DAG starts beside this sensor
        (not downstream of it), so a drain's first calls do not wait for the advice: the
        list then holds the advised solvers beyond them (possibly none), the advice counts
        the tasks they have claimed as backlog, and the sensor does not wait for a backlog
        (those solvers take what arrives).
    """

    template_fields: Sequence[str] = ("store_schema", "store_table", "per_solver_in_flight",
                                      "max_solvers", "solver_kwargs", "fan_out")

    def __init__(
        self,
        *,
        router_conn_id: str = RouterHook.default_conn_name,
        postgres_conn_id: str = "postgres_default",
        store_schema: str = "llm_router",
        store_table: str = "tasks",
        per_solver_in_flight: int = 100,
        max_solvers: int = 16,
        input_tokens_per_call: int = 0,
        deferrable: bool = True,
        solver_kwargs: dict[str, Any] | None = None,
        fan_out: int | str = 0,
        lead_solvers: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if lead_solvers < 0 or (lead_solvers and solver_kwargs is None):
            raise ValueError(f"lead_solvers: {lead_solvers} must be >= 0, and is only used "
                             "with solver_kwargs (the list the solvers are mapped over)")
        self.lead_solvers = lead_solvers
        self.deferrable = deferrable
        self.solver_kwargs = solver_kwargs
        self.fan_out = fan_out
        self.router_conn_id = router_conn_id
        self.postgres_conn_id = postgres_conn_id
        self.store_schema = store_schema
        self.store_table = store_table
        self.per_solver_in_flight = per_solver_in_flight
        self.max_solvers = max_solvers
        self.input_tokens_per_call = input_tokens_per_call

    def execute(self, context: Any) -> Any:
        if self.lead_solvers:  # one look: the solvers beside this sensor take what comes
            first = self.poke(context)
            if first.is_done:
                return first.xcom_value
            self.log.info("no solver to add to the %d started beside this sensor",
                          self.lead_solvers)
            return []
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value  # already the result (see poke)
        self.defer(
            trigger=BackpressureTrigger(
                router_conn_id=self.router_conn_id,
                postgres_conn_id=self.postgres_conn_id,
                schema=self.store_schema,
                table=self.store_table,
                per_solver_in_flight=int(self.per_solver_in_flight),
                max_solvers=int(self.max_solvers),
                input_tokens_per_call=int(self.input_tokens_per_call),
                poll_interval_s=float(self.poke_interval),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)),
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        """Resumed by the trigger's event: the advice, or the error that stopped the wait."""
        if event.get("status") != "ready":
            raise AirflowException(f"waiting for backlog and capacity failed: "
                                   f"{event.get('error', event)}")
        advice = event["advice"]
        self.log.info("backlog %d: %d solver(s) for %.1f calls in flight (backpressure %.2f)",
                      event["backlog"], advice["solvers"], advice["in_flight_needed"],
                      advice["backpressure"])
        return self._result(advice, context)

    def _result(self, advice: dict[str, Any], context: Any) -> Any:
        """The XCom: the advice, or with ``solver_kwargs`` one kwargs dict per solver (and
        the advice as the XCom ``advice``)."""
        if self.solver_kwargs is None:
            return advice
        ti = context.get("ti") if hasattr(context, "get") else None
        if ti is not None:
            ti.xcom_push(key="advice", value=advice)
        try:
            fan_out = int(self.fan_out or 0)
        except (TypeError, ValueError):
            raise ValueError(f"fan_out: {self.fan_out!r} is not a whole number >= 0 "
                             "(0: as many solvers as advised)") from None
        if fan_out < 0:
            raise ValueError(f"fan_out: {fan_out} must be >= 0 (0: as many as advised)")
        solvers = fan_out or max(1, int(advice["solvers"]))
        return [dict(self.solver_kwargs) for _ in range(max(0, solvers - self.lead_solvers))]

    def poke(self, context: Any) -> PokeReturnValue:
        with TaskStore.from_conn_id(self.postgres_conn_id, schema=self.store_schema,
                                    table=self.store_table) as store:
            store.migrate()  # a first deployment may have no table yet
            backlog = store.backlog_size(cap=BACKLOG_REPORT_CAP)  # enough for any advice
            if self.lead_solvers:  # the lead may have claimed some, or all, already: they
                backlog += store.claims_in_progress().count  # are the fan-out's work too
        if backlog == 0:
            self.log.info("no backlog in %s.%s yet", self.store_schema, self.store_table)
            return PokeReturnValue(is_done=False)
        client = RouterHook(self.router_conn_id).client
        try:
            advice = client.advice(backlog, int(self.per_solver_in_flight),
                                   int(self.max_solvers), self.input_tokens_per_call)
        finally:
            client.close()
        if not advice.any_enabled:
            self.log.info("backlog %d but no enabled model in the router", backlog)
            return PokeReturnValue(is_done=False)
        self.log.info("backlog %d: %d solver(s) for %.1f calls in flight "
                      "(backpressure %.2f)", backlog, advice.solvers,
                      advice.in_flight_needed, advice.backpressure)
        return PokeReturnValue(is_done=True, xcom_value=self._result(advice.to_dict(), context))
