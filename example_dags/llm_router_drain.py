"""Drain the task store's backlog with mapped, deferrable solvers, as many as the router
advises.

A run starts two tasks at once. ``lead``, one ``SolveTaskOperator``, drains at once: it
starts in its worker (``start_in_worker_s``) rather than waiting for the triggerer to pick
its trigger up, so an arrival on an idle system is admitted as soon as the task starts;
there it keeps as many calls in flight as the router advises for the whole backlog
(``start_in_flight``), so the first burst goes out before the other solvers have started;
and it hands the rest, and the lingering, to the triggerer. ``advise`` (a
``BackpressureSensor``) asks the router's advice: the calls in flight that saturate each
model's quota (a window's quota sent at once, or by Little's law for a model slower than its
window), divided by one solver's ``max_in_flight``, capped by the backlog and
``max_solvers``. It returns one settings dict per advised solver beyond the lead, and
``SolveTaskOperator`` is mapped over that list with ``expand_kwargs`` (the advice itself is
the sensor's XCom ``advice``); with no backlog left, none. A quota raise or a slower model
changes the fan-out on the next run without editing the DAG.
Solvers claim tasks as slots free up, with ``SKIP LOCKED``, so any number of them share the
backlog, and each ends when the backlog is empty or its time budget is spent.

Started by arrivals: the DAG is scheduled on the ``llm_router_backlog`` asset, whose watcher
(``BacklogArrivalTrigger``, in the triggerer) fires when an enqueue notifies the task store's
channel, so a drain starts within seconds of work arriving on an idle system. One run at a
time; enqueues during a run are drained by it, and their event starts one more run that
finds what is left. The solvers stay ``linger_s`` (default 300 s, or the environment's
``LLM_ROUTER_DRAIN_LINGER_S``), waiting in the triggerer after the backlog empties, and take
tasks that arrive meanwhile within milliseconds: the drain stays warm between bursts of
work; 0 ends them at once. It can also be triggered by hand; ``{"fan_out": 8}`` forces the
fan-out (the lead and 7 more).
"""

from __future__ import annotations

import os

from airflow.sdk import DAG, Asset, AssetWatcher, Param

from airflow_llm_router.operators.solve import SolveTaskOperator
from airflow_llm_router.sensors.backpressure import BackpressureSensor
from airflow_llm_router.triggers.backlog import BacklogArrivalTrigger

ROUTER_CONN_ID = "llm_router_default"
BACKEND_CONN_ID = "models_backend_default"
POSTGRES_CONN_ID = "postgres_default"
STORE_SCHEMA = "llm_router"
#: Seconds the solvers wait for new work once the backlog is empty (warm between bursts).
LINGER_S = float(os.environ.get("LLM_ROUTER_DRAIN_LINGER_S", "300"))

BACKLOG = Asset(
    "llm_router_backlog",
    watchers=[AssetWatcher(
        name="llm_router_backlog_arrivals",
        trigger=BacklogArrivalTrigger(postgres_conn_id=POSTGRES_CONN_ID, schema=STORE_SCHEMA),
    )],
)

with DAG(
    dag_id="llm_router_drain",
    schedule=[BACKLOG],
    max_active_runs=1,
    catchup=False,
    render_template_as_native_obj=True,  # the solvers' settings render as numbers
    tags=["llm-router"],
    params={
        "fan_out": Param(0, type="integer", minimum=0,
                         description="solvers, the lead included; 0: as many as the "
                                     "router advises"),
        "max_solvers": Param(16, type="integer", minimum=1,
                             description="the most solvers the advice may ask for"),
        "claim_batch": Param(100, type="integer", minimum=1,
                             description="the most tasks one claim takes"),
        "max_in_flight": Param(100, type="integer", minimum=1,
                               description="model calls in flight per solver"),
        "time_budget_s": Param(1500, type="number", exclusiveMinimum=0,
                               description="a solver claims no new task after this"),
        "linger_s": Param(LINGER_S, type="number", minimum=0,
                          description="once the backlog is empty, solvers wait this long "
                                      "for new tasks before ending (0: end at once)"),
        "lead_in_worker_s": Param(30, type="number", minimum=0,
                                  description="the lead solver drains in its worker for up "
                                              "to this long before deferring (a sooner "
                                              "start; 0: defer at once)"),
        "lead_in_flight": Param(0, type="integer", minimum=0,
                                description="calls the lead keeps in flight in its worker; "
                                            "0: as many as the router advises for the "
                                            "backlog (the first burst, alone)"),
        "store_schema": Param(STORE_SCHEMA, type="string"),
    },
    doc_md=__doc__,
) as dag:

    settings = {  # DrainSettings fields
        "claim_batch": "{{ params.claim_batch }}",
        "max_in_flight": "{{ params.max_in_flight }}",
        "time_budget_s": "{{ params.time_budget_s }}",
        "linger_s": "{{ params.linger_s }}",
    }

    # The lead solver needs no advice: it starts with the run and admits its first calls
    # from its worker, while the sensor works out how many more solvers the quotas take.
    # Its priority puts it first to the executor and to the API server's ``ti_run`` (by
    # default the sensor's downstream solvers would rank the sensor first).
    SolveTaskOperator(
        task_id="lead",
        priority_weight=10,
        router_conn_id=ROUTER_CONN_ID,
        backend_conn_id=BACKEND_CONN_ID,
        postgres_conn_id=POSTGRES_CONN_ID,
        store_schema="{{ params.store_schema }}",
        settings={**settings, "start_in_worker_s": "{{ params.lead_in_worker_s }}",
                  "start_in_flight": "{{ params.lead_in_flight }}"},
    )

    # The sensor returns one settings dict per solver beyond the lead (as many as the router
    # advises, or the run's fan_out, less one) and the solvers are mapped over that list:
    # no planning task between them.
    advise = BackpressureSensor(
        task_id="advise",
        router_conn_id=ROUTER_CONN_ID,
        postgres_conn_id=POSTGRES_CONN_ID,
        store_schema="{{ params.store_schema }}",
        per_solver_in_flight="{{ params.max_in_flight }}",
        max_solvers="{{ params.max_solvers }}",
        fan_out="{{ params.fan_out }}",
        lead_solvers=1,
        solver_kwargs={"settings": settings, "store_schema": "{{ params.store_schema }}"},
    )

    SolveTaskOperator.partial(
        task_id="solve",
        router_conn_id=ROUTER_CONN_ID,
        backend_conn_id=BACKEND_CONN_ID,
        postgres_conn_id=POSTGRES_CONN_ID,
    ).expand_kwargs(advise.output)
