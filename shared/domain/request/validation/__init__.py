"""Request validation: what a job request must satisfy before flexjobs submits it.

:func:`validators` is the list of checks intake runs on every parsed
:class:`~shared.domain.request.message.JobRequest` (its Vertex REST body already has flexjobs'
defaults applied); the bootstrap, the tests and the CLI all take it from here. Together they return
*every* problem as a :class:`~shared.kernel.errors.FieldError` with an exact path such as
``customJob.jobSpec.workerPoolSpecs[1].machineSpec.acceleratorType``. They never raise: the
body is untrusted JSON, so each value is type-checked before it is used.

The rules come from three places:

- Dynamic Workload Scheduler (seed 000): under ``scheduling.strategy = FLEX_START`` only L4,
  A100, H100, H200 and B200 GPUs, a ``timeout`` of at most 7 days, and the same machine
  configuration in every worker pool.
- Vertex AI v1 REST semantics: the AcceleratorType and Strategy enums, Duration strings,
  ``maxWaitDuration`` applying to FLEX_START only, resource-name formats, ``trafficSplit``.
- Operator guards (:class:`Guards`): allowed images and service accounts, the field policy
  (:mod:`shared.domain.request.field_policy`), GPU and replica caps.

The body is the canonical REST form (:mod:`shared.domain.request.canonical`): whatever spelling the
requester used, a field has one name here, int64 values are integers and enums are names.
A training request's ``fallback`` rungs are checked as the attempts they would produce.

Modules: :mod:`.check` (the whole request, the rungs, :func:`validators`), :mod:`.training`
and :mod:`.deployments` (the kinds), :mod:`.fields` (fields both have: service account, image,
machine spec), :mod:`.readers` (typed reads of untrusted JSON), :mod:`.guards`. The options
(``retryPolicy``, ``fallback``, ``checkpointUri``) are checked by
:func:`shared.domain.request.message.check_options`, because parsing reports them too.
"""

from __future__ import annotations

from shared.domain.request.message import check_options
from shared.domain.request.validation.check import Validator, check_request, validators
from shared.domain.request.validation.guards import Guards
from shared.domain.request.wire import CUSTOM_TASK_DEFINITION

__all__ = [
    "CUSTOM_TASK_DEFINITION",
    "Guards",
    "Validator",
    "check_options",
    "check_request",
    "validators",
]
