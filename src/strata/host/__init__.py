"""The host loop of seed 001 (``strata host``): retrieve, then answer or plan and dispatch.

:func:`run_host` ``(core, provider, request, *, approver, profile, max_steps,
timeout_s, …) -> HostResult``: the host model calls ``local_kb_retrieval``
until its context suffices, then answers (citing passages) or emits a plan
of capability tasks (``terminal_exec`` through the gateway's policy and
approval gate, ``docx``, ``excel``) that are dispatched in order. The run,
its model steps, plans and tasks are ledger events (``host_run_started``,
``agent_step``, ``plan_created``, ``task_started``, ``task_finished``,
``host_run_finished``; ``strata history --action host``) that link their
traces. See :mod:`strata.host.loop` and :mod:`strata.host.tools`.
``Repository.host(...)`` is the facade's.
"""

from strata.host.loop import (
    MAX_STEPS,
    STATUSES,
    SYSTEM_PROMPT,
    Activity,
    HostPlan,
    HostResult,
    HostStep,
    HostTask,
    run_host,
)
from strata.host.tools import KB_TOOL, PLAN_TOOL, specs

__all__ = [
    "KB_TOOL",
    "MAX_STEPS",
    "PLAN_TOOL",
    "STATUSES",
    "SYSTEM_PROMPT",
    "Activity",
    "HostPlan",
    "HostResult",
    "HostStep",
    "HostTask",
    "run_host",
    "specs",
]
