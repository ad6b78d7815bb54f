"""The yardstick a drain is measured against (docs/benchmarks.md, "The yardstick").

Two numbers bracket the best possible makespan of a workload under the quotas, and a third
says how much of it is reachable without knowing each call's cost in advance:

- :func:`~llm_router_devkit.yardstick.lp_bound.lp_bound`: a **lower bound** (no schedule
  can finish sooner), from a linear relaxation that counts every prompt's own cost on each
  model and the sliding windows step by step;
- :func:`~llm_router_devkit.yardstick.reference.reference_schedule`: an **achievable**
  schedule that knows each prompt's cost in advance and obeys the same limits exactly
  (with ``ordered=True``, one that also keeps each prompt's ordered preference list, as a
  router admitting with ``ordered=True`` must: the fair reference for such a workload);
- :func:`~llm_router_devkit.yardstick.reference.blind_reference_schedule`: the same
  simulation deciding on what a router can know (each model's expected latency, each
  prompt's reservation) and charged the real draws: an achievable makespan without
  knowing the draws, which tells how much of a router's gap to the reference is reachable.

A run faster than the LP bound means the bound is wrong (a bug to fix, not a result).
"""

from llm_router_devkit.yardstick.instance import Instance, Limits, instance_from_profile
from llm_router_devkit.yardstick.lp_bound import LPBound, lp_bound
from llm_router_devkit.yardstick.reference import (
    Schedule,
    blind_reference_schedule,
    check_preferences,
    check_schedule,
    reference_schedule,
)

__all__ = ["Instance", "LPBound", "Limits", "Schedule", "blind_reference_schedule",
           "check_preferences", "check_schedule", "instance_from_profile", "lp_bound",
           "reference_schedule"]
