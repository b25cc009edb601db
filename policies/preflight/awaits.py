"""Rule await-timeout: a Deployment or StatefulSet is awaited at least as long as its pods' startup probe
plus an image pull may take (pulumi-kubernetes provider/pkg/await)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs

from policies.preflight.resources import Finding, Res, get_path

__all__ = [
    "DEFAULT_DEPLOYMENT_AWAIT_SECONDS",
    "TIMEOUT_ANNOTATION",
    "SKIP_AWAIT_ANNOTATION",
    "AWAITED_KINDS",
    "DEFAULT_IMAGE_PULL_ALLOWANCE_SECONDS",
    "PROBE_DEFAULTS",
    "startup_budget_seconds",
    "await_findings",
    "await_validate",
]


# pulumi-kubernetes provider/pkg/await/deployment.go `DefaultDeploymentTimeoutMins = 10` and
# statefulset.go `DefaultStatefulSetTimeoutMins = 10`; overridden by the annotation or customTimeouts.create.
DEFAULT_DEPLOYMENT_AWAIT_SECONDS = 600

TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds"

SKIP_AWAIT_ANNOTATION = "pulumi.com/skipAwait"

AWAITED_KINDS = ("Deployment", "StatefulSet")

# Not an upstream fact: the kit's allowance for pulling a multi-GB serving image onto a fresh node before the
# startup probe starts counting. default: 300 s
DEFAULT_IMAGE_PULL_ALLOWANCE_SECONDS = 300

# Kubernetes probe defaults (core/v1 Probe): periodSeconds 10, failureThreshold 3, initialDelaySeconds 0.
PROBE_DEFAULTS = {"initialDelaySeconds": 0, "periodSeconds": 10, "failureThreshold": 3}


def startup_budget_seconds(spec: Mapping[str, Any]) -> int | None:
    """The longest startup probe allowance of a pod: initialDelaySeconds + periodSeconds x failureThreshold."""
    budgets = []
    for c in spec.get("containers") or ():
        probe = c.get("startupProbe") if isinstance(c, Mapping) else None
        if isinstance(probe, Mapping):
            p = {k: int(probe.get(k, d) or d) for k, d in PROBE_DEFAULTS.items()}
            budgets.append(p["initialDelaySeconds"] + p["periodSeconds"] * p["failureThreshold"])
    return max(budgets) if budgets else None


def _await_problem(r: Res, pull_allowance: int) -> str | None:
    if r.kind not in AWAITED_KINDS or not r.type.startswith("kubernetes:apps/"):
        return None
    annotations = (r.props.get("metadata") or {}).get("annotations") or {}
    if str(annotations.get(SKIP_AWAIT_ANNOTATION, "")).lower() == "true":
        return None
    budget = startup_budget_seconds(get_path(r.props, "spec", "template", "spec") or {})
    if budget is None:
        return None
    need = budget + pull_allowance
    if TIMEOUT_ANNOTATION in annotations:
        timeout, source = int(float(annotations[TIMEOUT_ANNOTATION])), f"annotation {TIMEOUT_ANNOTATION}"
    elif r.custom_timeout_create:
        timeout, source = int(r.custom_timeout_create), "customTimeouts.create"
    else:
        timeout, source = DEFAULT_DEPLOYMENT_AWAIT_SECONDS, "pulumi-kubernetes' default"
    if timeout >= need:
        return None
    return (f"pulumi-kubernetes waits {timeout} s ({source}) for the {r.kind} to become ready, but its pods may "
            f"take {need} s (startup probe {budget} s + {pull_allowance} s image pull): `pulumi up` fails a rollout "
            f"that would succeed; set {TIMEOUT_ANNOTATION} to at least {need}")


def await_findings(resources: Sequence[Res], *, pull_allowance: int = DEFAULT_IMAGE_PULL_ALLOWANCE_SECONDS
                   ) -> list[Finding]:
    """Deployments and StatefulSets whose await timeout is shorter than their pods' declared start-up budget."""
    return [Finding("await-timeout", r.label, problem,
                    f"Set metadata.annotations['{TIMEOUT_ANNOTATION}'] (or customTimeouts) to the start-up budget "
                    "plus the image pull.", r.urn)
            for r in resources if (problem := _await_problem(r, pull_allowance)) is not None]


def await_validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """The resource's own customTimeouts.create (CrossGuard passes it in opts) counts like the annotation."""
    timeouts = getattr(getattr(args, "opts", None), "custom_timeouts", None)
    create = float(getattr(timeouts, "create_seconds", 0) or 0) or None
    problem = _await_problem(Res(args.urn, args.resource_type, args.props, custom_timeout_create=create),
                             DEFAULT_IMAGE_PULL_ALLOWANCE_SECONDS)
    if problem:
        report_violation(problem, None)
