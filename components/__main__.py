"""Host the kit's components as a Pulumi component package (`pulumi package add <repo>/components`).

The schema is inferred by the SDK's analyzer (pulumi.provider.experimental) from each component's
`args` TypedDict (inputs, with each field's docstring) and its class-level `pulumi.Output` annotations.
"""

import sys
from pathlib import Path

# The plugin runs from components/; its modules import each other as `components.*`.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi import ComponentResource  # noqa: E402
from pulumi.provider.experimental import component_provider_host  # noqa: E402

from components.aws.cluster import GpuCluster  # noqa: E402
from components.aws.network import Network  # noqa: E402
from components.aws.node_pool import GpuNodePool  # noqa: E402
from components.k8s.fabric import Fabric  # noqa: E402
from components.k8s.gateway import Gateway  # noqa: E402
from components.k8s.gpu_stack import GpuStack  # noqa: E402
from components.k8s.mesh import Mesh  # noqa: E402
from components.k8s.observability import Observability  # noqa: E402
from components.k8s.platform import Platform  # noqa: E402
from components.k8s.serving import ModelDeployment  # noqa: E402
from components.k8s.tenancy import Tenancy  # noqa: E402

__all__ = ["PACKAGE", "VERSION", "COMPONENTS"]

PACKAGE = "aifactory"
VERSION = "0.1.0"
COMPONENTS: tuple[type[ComponentResource], ...] = (Network, GpuCluster, GpuNodePool, Tenancy, Gateway,
                                                  ModelDeployment, GpuStack, Mesh, Fabric, Observability, Platform)

if __name__ == "__main__":
    component_provider_host(list(COMPONENTS), PACKAGE, version=VERSION)
