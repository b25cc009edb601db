"""Rule object-size: a ConfigMap or Secret whose data the API server would refuse.

Kubernetes sums the lengths of every `data` and `binaryData` value (a Secret's `stringData` is merged into `data`)
and refuses the object past 1 MiB (kubernetes/kubernetes@v1.34.1 pkg/apis/core/validation/validation.go,
ValidateConfigMap and ValidateSecret: `totalSize > core.MaxSecretSize`). The kit's largest such object is the
gateway's envoy.yaml, which grows with every model (its routes and cluster: components/k8s/gateway/envoy/).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs

__all__ = ["MAX_DATA_BYTES", "SIZED_TYPES", "data_bytes", "size_problem", "size_validate"]

MAX_DATA_BYTES = 1024 * 1024  # core.MaxSecretSize
SIZED_TYPES = ("kubernetes:core/v1:ConfigMap", "kubernetes:core/v1:Secret")


def _decoded_len(value: str) -> int:
    """binaryData (and a Secret's data) travel base64-encoded; the API server counts the decoded bytes."""
    try:
        return len(base64.b64decode(value, validate=True))
    except (binascii.Error, ValueError):
        return len(value.encode())


def data_bytes(resource_type: str, props: Mapping[str, Any]) -> int:
    """The bytes the API server counts against MAX_DATA_BYTES (values that are not yet known count as 0)."""
    secret = resource_type.endswith(":Secret")
    total = 0
    for key, decode in (("data", secret), ("binaryData", True), ("stringData", False)):
        for value in (props.get(key) or {}).values():
            if isinstance(value, str):
                total += _decoded_len(value) if decode else len(value.encode())
    return total


def size_problem(resource_type: str, props: Mapping[str, Any]) -> str | None:
    if resource_type not in SIZED_TYPES:
        return None
    size = data_bytes(resource_type, props)
    if size <= MAX_DATA_BYTES:
        return None
    kind = resource_type.rsplit(":", 1)[1]
    return (f"its data is {size} bytes; the API server refuses a {kind} over {MAX_DATA_BYTES} bytes (1 MiB), so "
            f"`pulumi up` fails on it. For the gateway's envoy.yaml: split the models across stacks")


def size_validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    problem = size_problem(args.resource_type, args.props)
    if problem:
        report_violation(problem, None)
