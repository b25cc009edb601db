"""Host the kit's components as a Pulumi component package (`pulumi package add <repo>/components`).

The schema is inferred by the SDK's analyzer (pulumi.provider.experimental) from each component's
`args` TypedDict (inputs, with each field's docstring) and its class-level `pulumi.Output` annotations.

Numbers reach a provider as doubles (protobuf `Value.number_value`); the SDK's ComponentProvider (pulumi 3.272.0,
`map_input_properties`) converts integer properties with `int()` and then overwrites the result with the raw
value, and never converts integers inside maps or lists. `Provider` restores them, so the components' argument
checks see `8`, not `8.0`, for an integer field (a quota of 8 GPUs would otherwise render as "8.0").
"""

import sys
from pathlib import Path
from typing import Any

# The plugin runs from components/; its modules import each other as `components.*`.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi import ComponentResource  # noqa: E402
from pulumi.provider import main  # noqa: E402
from pulumi.provider.experimental.analyzer import PropertyDefinition, PropertyType  # noqa: E402
from pulumi.provider.experimental.component import ComponentProvider  # noqa: E402

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

__all__ = ["PACKAGE", "VERSION", "COMPONENTS", "Provider"]

PACKAGE = "aifactory"
VERSION = "0.1.0"


def _hosted(cls: type[ComponentResource]) -> type[ComponentResource]:
    """`cls` as the package hosts it: registered as `aifactory:index:<name>`, the type its schema names and the
    engine asks the provider to construct. The Kubernetes components keep `aifactory:k8s:<name>` when a program
    imports them (the kit's stacks' URNs, byte-identical since before the package hosted them); the AWS components
    use the index token everywhere already."""
    token = f"{PACKAGE}:index:{cls.__name__}"
    if getattr(cls, "pulumi_type", token) == token:
        return cls
    return type(cls.__name__, (cls,), {"pulumi_type": token, "__module__": cls.__module__, "__doc__": cls.__doc__,
                                       "__qualname__": cls.__qualname__})


COMPONENTS: tuple[type[ComponentResource], ...] = tuple(
    _hosted(c) for c in (Network, GpuCluster, GpuNodePool, Tenancy, Gateway, ModelDeployment, GpuStack, Mesh, Fabric,
                         Observability, Platform))


def _integral(value: Any, prop: PropertyDefinition | None) -> Any:
    """`value` with the doubles an integer property (or a map or list of them) received made ints."""
    if prop is None:
        return value
    if prop.type == PropertyType.INTEGER and isinstance(value, float) and value.is_integer():
        return int(value)
    if prop.type == PropertyType.OBJECT and isinstance(value, dict) and prop.additional_properties is not None:
        return {k: _integral(v, prop.additional_properties) for k, v in value.items()}
    if prop.type == PropertyType.ARRAY and isinstance(value, list):
        return [_integral(v, prop.items) for v in value]
    return value


class Provider(ComponentProvider):
    """The SDK's component provider, with integer inputs delivered as ints (see the module docstring)."""

    def map_input_properties(self, inputs: Any, properties: dict[str, PropertyDefinition],
                             mapping: dict[str, str], component_name: str, property_path: str) -> Any:
        mapped = dict(super().map_input_properties(inputs, properties, mapping, component_name, property_path))
        for schema_name, prop in properties.items():  # nested complex types come back through this method
            py_name = mapping[schema_name]
            if py_name in mapped and not prop.ref:
                mapped[py_name] = _integral(mapped[py_name], prop)
        return mapped


if __name__ == "__main__":
    main(Provider(list(COMPONENTS), PACKAGE, None, VERSION), sys.argv[1:])
