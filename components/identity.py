"""What a Kubernetes component asks of the cluster it runs on when a pod needs a cloud role.

A model that reads its weights from s3:// and the cluster autoscaler need an IAM role bound to their service account.
The Kubernetes components ask for it through this protocol, so that they import no cloud layer: on EKS the
`components.aws.cluster.GpuCluster` answers with an IRSA role (a role whose trust policy admits the service account
through the cluster's OIDC provider); a cluster elsewhere has no such object and its models use hf:// or pvc://.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pulumi

__all__ = ["WorkloadIdentity"]


class WorkloadIdentity(Protocol):
    """A cluster (a Pulumi resource) that gives one service account a cloud role."""

    def service_account_role(self, name: str, *, namespace: str, service_account: str,
                             inline_policy: Mapping[str, Any], opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
        """Create the role `name` for `namespace/service_account` with `inline_policy`, as `opts` says (its parent),
        and return its ARN as an input that also depends on the role's policies (pods start once they may act)."""
        ...
