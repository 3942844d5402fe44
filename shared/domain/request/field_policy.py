"""The field policy: the CustomJobSpec fields that reach networks, consoles or paid resources.

These fields let a job join a VPC network, open a shell or a dashboard on its nodes, run on a
persistent resource someone pays for, or write to an experiment or a TensorBoard; a request
must not pick them freely. :data:`POLICY_FIELDS` is the one table of them. Each field is
refused unless the operator allows it with ``FLEXJOBS_FIELD_POLICY``, a JSON object mapping a
field name to

- ``true``: any value;
- ``false``: refused (the default for every field but ``protectedArtifactLocationId``);
- a list of strings: only these values (every element of ``reservedIpRanges``; the
  ``networkAttachment`` of ``pscInterfaceConfig``, whose ``dnsPeeringConfigs`` then need
  ``true``).

For example ``{"network": ["projects/123/global/networks/vpc"], "enableWebAccess": true}``.
``protectedArtifactLocationId`` is allowed by default, as a region name only. The policy
applies wherever a CustomJobSpec is: ``customJob.jobSpec``, ``hyperparameterTuningJob.
trialJobSpec`` and ``trainingPipeline.trainingTaskInputs``. Bodies are canonical
(:mod:`shared.domain.request.canonical`), so ``false`` and ``""`` are absent and never refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from shared.domain.model.values import show
from shared.kernel.errors import FieldError
from shared.kernel.regions import REGION_HINT, is_region

SETTING: Final = "FLEXJOBS_FIELD_POLICY"

#: What the operator allows for a field: ``True`` (anything), ``False`` or the values allowed.
Allowance = bool | tuple[str, ...]


def _itself(value: Any) -> list[tuple[str, Any]]:
    return [("", value)]


def _each(value: Any) -> list[tuple[str, Any]]:
    return [(f"[{i}]", item) for i, item in enumerate(value)] if isinstance(value, list) else []


def _kms_key(value: Any) -> list[tuple[str, Any]]:
    if not isinstance(value, dict):
        return [("", value)]
    return [(f".{key}", item) for key, item in value.items()]


def _attachment(value: Any) -> list[tuple[str, Any]]:
    if not isinstance(value, dict):
        return [("", value)]
    # DNS peering resolves names through another project's network: never from an allow-list.
    return [(f".{key}", item) for key, item in value.items()]


@dataclass(frozen=True)
class PolicyField:
    """One field of the policy, in camelCase as in the canonical body.

    ``values`` yields the (path suffix, value) pairs an allow-list is checked against; a
    boolean field has none (the policy allows it or not). ``form`` is a shape every value
    must have whatever the policy says. ``where`` is the message the field belongs to: a
    CustomJobSpec (``jobSpec``), the top-level job, tuning job or pipeline (``resource``),
    or a worker pool (``pool``).
    """

    name: str
    what: str
    example: str
    values: Callable[[Any], list[tuple[str, Any]]] | None = _itself
    allowed_by_default: bool = False
    form: Callable[[Any], bool] | None = None
    form_hint: str = ""
    where: str = "jobSpec"


POLICY_FIELDS: Final[tuple[PolicyField, ...]] = (
    PolicyField(
        "network",
        "peers the job with a VPC network",
        '{"network": ["projects/123/global/networks/vpc"]}',
    ),
    PolicyField(
        "reservedIpRanges",
        "picks IP ranges of the peered network",
        '{"reservedIpRanges": ["vertex-range"]}',
        values=_each,
    ),
    PolicyField(
        "pscInterfaceConfig",
        "attaches the job to a network through Private Service Connect",
        '{"pscInterfaceConfig": ["projects/p/regions/r/networkAttachments/a"]}',
        values=_attachment,
    ),
    PolicyField(
        "enableWebAccess",
        "opens an interactive shell on every node",
        '{"enableWebAccess": true}',
        values=None,
    ),
    PolicyField(
        "enableDashboardAccess",
        "opens a dashboard on the job's nodes",
        '{"enableDashboardAccess": true}',
        values=None,
    ),
    PolicyField(
        "persistentResourceId",
        "runs the job on a persistent resource, capacity billed to its owner",
        '{"persistentResourceId": ["my-resource"]}',
    ),
    PolicyField(
        "protectedArtifactLocationId",
        "keeps the job's artifacts in another region",
        '{"protectedArtifactLocationId": ["europe-west4"]}',
        allowed_by_default=True,
        form=is_region,
        form_hint=REGION_HINT,
    ),
    PolicyField(
        "experiment",
        "writes to a Vertex AI experiment",
        '{"experiment": ["projects/p/locations/l/metadataStores/default/contexts/e"]}',
    ),
    PolicyField(
        "experimentRun",
        "writes to a Vertex AI experiment run",
        '{"experimentRun": ["projects/p/locations/l/metadataStores/default/contexts/r"]}',
    ),
    PolicyField(
        "tensorboard",
        "writes to a Vertex AI TensorBoard",
        '{"tensorboard": ["projects/p/locations/l/tensorboards/t"]}',
    ),
    PolicyField(
        "nfsMounts",
        "mounts NFS shares of a network into the containers",
        '{"nfsMounts": true}',
        values=None,
        where="pool",
    ),
    PolicyField(
        "encryptionSpec",
        "encrypts the job's resources with a customer-managed KMS key",
        '{"encryptionSpec": ["projects/p/locations/l/keyRings/r/cryptoKeys/k"]}',
        values=_kms_key,
        where="resource",
    ),
    PolicyField(
        "modelToUpload",
        "registers the trained model, whose serving container later runs on endpoints",
        '{"modelToUpload": true}',
        values=None,
        where="resource",
    ),
    PolicyField(
        "parentModel",
        "adds the trained model as a version of an existing model",
        '{"parentModel": ["projects/p/locations/l/models/m"]}',
        where="resource",
    ),
    PolicyField(
        "modelId",
        "names the model the pipeline registers",
        '{"modelId": true}',
        values=None,
        where="resource",
    ),
    PolicyField(
        "inputDataConfig",
        "reads a managed dataset and exports it to a destination the request names",
        '{"inputDataConfig": true}',
        values=None,
        where="resource",
    ),
)

_BY_NAME: Final = {f.name: f for f in POLICY_FIELDS}


def parse_field_policy(text: str | None) -> dict[str, Allowance]:
    """Read ``FLEXJOBS_FIELD_POLICY`` (None or empty: every field at its default).

    Raises:
        ValueError: the text is not such a JSON object; the message names the setting.

    Examples:
        >>> parse_field_policy('{"network": ["projects/1/global/networks/v"], "tensorboard": true}')
        {'network': ('projects/1/global/networks/v',), 'tensorboard': True}
    """
    if not text or not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{SETTING} is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"{SETTING} must be a JSON object mapping field names to allowances")
    policy: dict[str, Allowance] = {}
    for name, allowance in raw.items():
        field = _BY_NAME.get(name)
        if field is None:
            raise ValueError(f"{SETTING}: unknown field {name!r}; use one of {', '.join(_BY_NAME)}")
        if isinstance(allowance, bool):
            policy[name] = allowance
        elif (
            field.values is not None
            and isinstance(allowance, list)
            and all(isinstance(v, str) and v for v in allowance)
        ):
            policy[name] = tuple(allowance)
        else:
            takes = "true or false" if field.values is None else "true, false or a list of strings"
            raise ValueError(f"{SETTING}: {name} takes {takes}, not {allowance!r}")
    return policy


def check_field_policy(
    policy: Mapping[str, Allowance], job_spec: dict[str, Any], base: str, where: str = "jobSpec"
) -> list[FieldError]:
    """Every policy field of the canonical message ``job_spec`` that is not allowed.

    ``where`` says which message it is (see :class:`PolicyField`); a CustomJobSpec by default.

    Examples:
        >>> check_field_policy({}, {"network": "projects/1/global/networks/v"}, "j")[0].path
        'j.network'
        >>> check_field_policy({"network": True}, {"network": "projects/1/global/networks/v"}, "j")
        []
    """
    errors: list[FieldError] = []
    for field in POLICY_FIELDS:
        if field.where != where or field.name not in job_spec:
            continue
        path = f"{base}.{field.name}"
        allowance = policy.get(field.name, field.allowed_by_default)
        if allowance is False:
            errors.append(
                FieldError(
                    path,
                    f"is not allowed: it {field.what}; remove it, or ask the operator to allow "
                    f"it in {SETTING} (for example {field.example})",
                )
            )
            continue
        values = field.values(job_spec[field.name]) if field.values else []
        for suffix, value in values:
            if field.form is not None and not field.form(value):
                errors.append(FieldError(path + suffix, f"must be {field.form_hint}"))
            elif allowance is not True and not isinstance(value, str):
                errors.append(
                    FieldError(
                        path + suffix, f"is allowed only when {SETTING} sets {field.name} to true"
                    )
                )
            elif allowance is not True and value not in allowance:
                listed = ", ".join(allowance) if isinstance(allowance, tuple) else ""
                errors.append(
                    FieldError(
                        path + suffix,
                        f"{show(value)} is not allowed: {SETTING} allows only {listed} here",
                    )
                )
    return errors
