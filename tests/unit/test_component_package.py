"""components/ as a Pulumi component package: the SDK's own analyzer infers a schema listing every component."""

import importlib
import json
from pathlib import Path

import pytest
import yaml
from pulumi.provider.experimental.component import ComponentProvider

package = importlib.import_module("components.__main__")


@pytest.fixture(scope="module")
def schema() -> dict:
    return json.loads(ComponentProvider(list(package.COMPONENTS), package.PACKAGE, version=package.VERSION).schema)


def test_plugin_manifest_declares_python() -> None:
    manifest = yaml.safe_load((Path(package.__file__).parent / "PulumiPlugin.yaml").read_text())
    assert manifest == {"runtime": "python"}


def test_schema_lists_every_component_with_its_inputs_and_outputs(schema) -> None:
    resources = schema["resources"]
    assert sorted(resources) == ["aifactory:index:Fabric", "aifactory:index:Gateway", "aifactory:index:GpuCluster",
                                 "aifactory:index:GpuNodePool",
                                 "aifactory:index:GpuStack", "aifactory:index:Mesh", "aifactory:index:ModelDeployment",
                                 "aifactory:index:Network", "aifactory:index:Observability", "aifactory:index:Platform",
                                 "aifactory:index:Tenancy"]
    shape = {token: (sorted(r["inputProperties"]), sorted(r.get("requiredInputs", [])), sorted(r["properties"]))
             for token, r in resources.items()}
    assert shape["aifactory:index:Network"] == (
        ["availabilityZones", "clusterName", "flowLogRetentionDays", "natGateways", "vpcCidr"],
        ["availabilityZones", "clusterName"],
        ["privateSubnetIds", "publicSubnetIds", "vpcId"])
    assert shape["aifactory:index:GpuCluster"] == (
        ["addonVersions", "adminRoleArns", "apiAccess", "awsProfile", "clusterName", "deletionProtection",
         "kubernetesVersion", "logRetentionDays", "publicAccessCidrs", "subnetIds", "supportType", "systemPool",
         "vpcId"],
        ["kubernetesVersion", "subnetIds", "vpcId"],
        ["clusterName", "kubeconfig", "nodeSecurityGroupId", "oidcIssuer", "oidcProviderArn"])
    assert shape["aifactory:index:GpuNodePool"] == (
        ["availabilityZones", "capacity", "clusterName", "clusterSecurityGroupId", "desiredSize", "fabric",
         "hugepagesMib", "instanceType", "kubernetesVersion", "labels", "maxSize", "minSize", "nodeRoleArn", "now",
         "placementGroup", "poolName", "rootVolumeGib", "subnetIds", "taints", "vpcId"],
        ["availabilityZones", "clusterName", "clusterSecurityGroupId", "instanceType", "subnetIds", "vpcId"],
        ["efaSecurityGroupId", "launchTemplateId", "nodeGroupName", "nodeRoleArn", "placementGroupName"])
    assert shape["aifactory:index:Tenancy"] == (
        ["gatewayNamespace", "kubernetesVersion", "models", "monitoringNamespace", "tenants"],
        ["tenants"],
        ["namespaceNames"])
    assert shape["aifactory:index:Gateway"] == (
        ["auth", "awsInternalLoadBalancer", "budgetService", "circuitBreakers", "connectTimeoutSeconds",
         "healthCheck", "idleTimeoutSeconds", "kubernetesVersion", "maxReplicas", "minReplicas", "models",
         "monitoringNamespace", "namespace", "outlierDetection", "requestHeadersTimeoutSeconds",
         "requestTimeoutSeconds", "retries", "routing", "serviceType", "streamIdleTimeoutSeconds", "tenants",
         "tokenBudgets", "traceSampleRatio"],
        ["models", "tenants"],
        ["namespace", "service"])
    assert shape["aifactory:index:ModelDeployment"] == (
        ["awsRegion", "cacheGib", "engine", "expertParallel", "gpusPerReplica", "groupFormationSeconds", "infiniband",
         "kvOffloadGib", "maxModelLength", "migProfile", "model", "modelName", "monitoringNamespace", "namespace",
         "pipelineParallel", "pool", "prefixCaching", "priorityClassName", "quantization", "quantizedCheckpoint",
         "replicas", "speculative",
         "startupBudgetSeconds", "storageClass", "task", "tenant", "tensorParallel", "timeoutSeconds", "tokenizer",
         "toolCallParser", "traceSampleRatio", "uri", "weightsGib", "workload"],
        ["engine", "model", "pool", "tenant"],
        ["kind", "namespace", "service"])
    assert shape["aifactory:index:GpuStack"] == (
        ["hostsHaveDrivers", "hostsHaveOfed", "kubernetesVersion", "pools", "rdma"], ["pools"], ["releaseName"])
    assert shape["aifactory:index:Fabric"] == (
        ["efaPools", "infiniband", "kubernetesVersion"], [], ["efaInstanceTypes"])
    assert shape["aifactory:index:Observability"] == (
        ["alerting", "awsRegion", "controlPlaneMetrics", "gatewayNamespace", "ingest", "kubernetesVersion", "lokiMode",
         "namespace", "retention", "storageClass", "tenantNamespaces", "traceRetention", "traceSampleRatio", "volumes"],
        [], ["collectorOtlpGrpc", "collectorOtlpHttp"])
    assert shape["aifactory:index:Platform"] == (
        ["fabric", "gpu", "installMetricsServer", "kubernetesVersion", "mesh", "observability", "tenancy"],
        ["gpu", "mesh", "observability", "tenancy"], ["monitoringNamespace", "systemNamespaceName"])
    assert shape["aifactory:index:Mesh"] == (
        ["gatewayNamespace", "kubernetesVersion", "models", "monitoringNamespace", "tenants", "traceSamplingPercent"],
        ["tenants"], ["istioVersion", "mtls"])
    assert sorted(schema["types"]) == [f"aifactory:index:{t}" for t in (
        "AlertReceiverArgs", "AlertingArgs", "BudgetServiceArgs", "CapacityArgs", "CircuitBreakersArgs",
        "EfaPoolArgs", "FabricArgs", "FabricInfinibandArgs", "GatewayAuthArgs", "GatewayModelArgs",
        "GatewayTenantArgs", "GatewayVariantArgs", "GpuPoolArgs", "GpuStackArgs", "HealthCheckArgs", "HeartbeatArgs",
        "IngestArgs", "JwtIssuerArgs", "MeshArgs", "MeshTenantArgs", "ModelInfinibandArgs", "ModelPoolArgs",
        "ObservabilityArgs", "OutlierDetectionArgs", "RateLimitArgs", "ReplicasArgs", "RetriesArgs", "RoutingArgs",
        "SecretRefArgs", "SpeculativeArgs", "SystemPoolArgs", "TaintArgs", "TenancyArgs", "TenantArgs",
        "TenantModelArgs", "TokenBudgetArgs", "VolumeSizesArgs")]


def test_every_optional_input_documents_its_default(schema) -> None:
    undocumented = []
    for token, r in [*schema["resources"].items(), *schema["types"].items()]:
        props = r.get("inputProperties", r.get("properties", {}))
        required = set(r.get("requiredInputs", r.get("required", [])))
        for name, prop in props.items():
            if name not in required and "Default:" not in prop.get("description", ""):
                undocumented.append(f"{token}.{name}")
    assert undocumented == []


def test_config_inputs_are_plain_and_ids_accept_outputs(schema) -> None:
    pool = schema["resources"]["aifactory:index:GpuNodePool"]["inputProperties"]
    assert pool["instanceType"] == {"type": "string", "plain": True,
                                    "description": "An instance type of the catalog (components.catalog), "
                                                   "e.g. p5.48xlarge."}
    assert "plain" not in pool["clusterName"]
    assert pool["capacity"]["$ref"] == "#/types/aifactory:index:CapacityArgs"


def test_tenancy_inputs_are_maps_of_typed_tenants_and_models(schema) -> None:
    tenancy = schema["resources"]["aifactory:index:Tenancy"]["inputProperties"]
    assert tenancy["tenants"]["type"] == "object"
    assert tenancy["tenants"]["additionalProperties"]["$ref"] == "#/types/aifactory:index:TenantArgs"
    assert tenancy["models"]["additionalProperties"]["$ref"] == "#/types/aifactory:index:TenantModelArgs"
    assert tenancy["kubernetesVersion"]["type"] == "string"
    tenant = schema["types"]["aifactory:index:TenantArgs"]
    assert {k: v["type"] for k, v in tenant["properties"].items()} == {
        "cpuQuota": "string", "memoryQuota": "string", "namespace": "string", "gpuQuota": "integer",
        "migQuota": "object"}
    assert tenant["properties"]["migQuota"]["additionalProperties"]["type"] == "integer"
    assert tenant["required"] == ["cpuQuota", "memoryQuota"]
    model = schema["types"]["aifactory:index:TenantModelArgs"]
    assert model["properties"]["callers"]["items"]["type"] == "string"
    assert model["properties"]["multiNode"]["type"] == "boolean"
    assert model["required"] == ["tenant"]
    outputs = schema["resources"]["aifactory:index:Tenancy"]["properties"]
    assert outputs["namespaceNames"]["additionalProperties"]["type"] == "string"


def test_gateway_inputs_type_models_tenants_and_settings(schema) -> None:
    gateway = schema["resources"]["aifactory:index:Gateway"]["inputProperties"]
    assert gateway["models"]["additionalProperties"]["$ref"] == "#/types/aifactory:index:GatewayModelArgs"
    assert gateway["tenants"]["additionalProperties"]["$ref"] == "#/types/aifactory:index:GatewayTenantArgs"
    assert gateway["routing"]["additionalProperties"]["$ref"] == "#/types/aifactory:index:RoutingArgs"
    assert gateway["minReplicas"]["type"] == "integer"
    assert gateway["traceSampleRatio"]["type"] == "number"
    assert gateway["awsInternalLoadBalancer"]["type"] == "boolean"
    model = schema["types"]["aifactory:index:GatewayModelArgs"]
    assert sorted(model["required"]) == ["engine", "tenant"]
    assert model["properties"]["timeoutSeconds"]["type"] == "number"
    assert model["properties"]["maxRequestBytes"]["type"] == "integer"
    assert model["properties"]["variant"]["$ref"] == "#/types/aifactory:index:GatewayVariantArgs"
    auth = schema["types"]["aifactory:index:GatewayAuthArgs"]["properties"]
    assert auth["issuers"]["items"]["$ref"] == "#/types/aifactory:index:JwtIssuerArgs"
    assert schema["types"]["aifactory:index:JwtIssuerArgs"]["required"] == ["issuer", "jwksUri"]


def test_model_deployment_inputs_type_the_model_and_its_pool(schema) -> None:
    deployment = schema["resources"]["aifactory:index:ModelDeployment"]["inputProperties"]
    assert deployment["pool"]["$ref"] == "#/types/aifactory:index:ModelPoolArgs"
    assert deployment["tensorParallel"]["type"] == "integer"
    assert deployment["weightsGib"]["type"] == "number"
    assert deployment["prefixCaching"]["type"] == "boolean"
    assert deployment["replicas"]["$ref"] == "#/types/aifactory:index:ReplicasArgs"
    pool = schema["types"]["aifactory:index:ModelPoolArgs"]
    assert sorted(pool["required"]) == ["instanceType", "name"]
    assert pool["properties"]["taints"]["items"]["$ref"] == "#/types/aifactory:index:TaintArgs"  # GpuNodePool's
    assert pool["properties"]["hugepagesMib"]["type"] == "integer"


def test_gpu_stack_inputs_are_pools_by_name(schema) -> None:
    stack = schema["resources"]["aifactory:index:GpuStack"]["inputProperties"]
    assert stack["pools"]["additionalProperties"]["$ref"] == "#/types/aifactory:index:GpuPoolArgs"
    assert stack["hostsHaveDrivers"]["type"] == "boolean"
    pool = schema["types"]["aifactory:index:GpuPoolArgs"]["properties"]
    assert pool["nodes"]["items"]["type"] == "string"
    assert pool["taints"]["items"]["$ref"] == "#/types/aifactory:index:TaintArgs"


def test_observability_inputs_type_alerting(schema) -> None:
    inputs = schema["resources"]["aifactory:index:Observability"]["inputProperties"]
    assert inputs["alerting"]["$ref"] == "#/types/aifactory:index:AlertingArgs"
    assert inputs["tenantNamespaces"]["items"]["type"] == "string"
    alerting = schema["types"]["aifactory:index:AlertingArgs"]["properties"]
    assert alerting["receivers"]["additionalProperties"]["$ref"] == "#/types/aifactory:index:AlertReceiverArgs"
    assert alerting["routes"]["additionalProperties"]["items"]["type"] == "string"
    assert schema["types"]["aifactory:index:AlertReceiverArgs"]["required"] == ["type"]
    assert sorted(schema["types"]["aifactory:index:SecretRefArgs"]["required"]) == ["key", "name"]


def test_platform_inputs_are_its_parts_args(schema) -> None:
    """The same TypedDicts as the parts' own inputs: one type each in the schema, referenced from both."""
    inputs = schema["resources"]["aifactory:index:Platform"]["inputProperties"]
    assert {k: v.get("$ref") for k, v in inputs.items()} == {
        "tenancy": "#/types/aifactory:index:TenancyArgs", "gpu": "#/types/aifactory:index:GpuStackArgs",
        "mesh": "#/types/aifactory:index:MeshArgs", "observability": "#/types/aifactory:index:ObservabilityArgs",
        "fabric": "#/types/aifactory:index:FabricArgs", "kubernetesVersion": None, "installMetricsServer": None}
    tenancy = schema["types"]["aifactory:index:TenancyArgs"]["properties"]
    assert tenancy["tenants"]["additionalProperties"]["$ref"] == "#/types/aifactory:index:TenantArgs"


def _wire(value):
    """What the engine delivers: protobuf numbers are doubles, so every int arrives as a float."""
    if isinstance(value, dict):
        return {k: _wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wire(v) for v in value]
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _inputs(component: str, wire_inputs: dict) -> dict:
    provider = package.Provider(list(package.COMPONENTS), package.PACKAGE, version=package.VERSION)
    return provider.map_inputs(wire_inputs, provider._component_defs[component])


def test_integer_inputs_reach_the_components_as_ints() -> None:
    """The SDK's ComponentProvider (pulumi 3.272.0 map_input_properties) leaves an integer input a float (its
    int() result is overwritten) and never converts ints in maps: the package's Provider does, so the components'
    checks accept what a Pulumi program in another language sends and quotas render as "8", not "8.0"."""
    from components.k8s.serving import serving_spec
    from components.k8s.tenancy import resource_quota, tenancy_spec

    tenancy = _inputs("Tenancy", _wire({"tenants": {"chat": {"gpuQuota": 8, "cpuQuota": "96", "memoryQuota": "1Ti",
                                                             "migQuota": {"1g.10gb": 7}}}}))
    assert tenancy == {"tenants": {"chat": {"cpu_quota": "96", "memory_quota": "1Ti", "gpu_quota": 8,
                                            "mig_quota": {"1g.10gb": 7}}}}
    hard = resource_quota(tenancy_spec("teams", tenancy).tenants["chat"])["spec"]["hard"]
    assert (hard["requests.nvidia.com/gpu"], hard["requests.nvidia.com/mig-1g.10gb"]) == ("8", "7")
    model = _inputs("ModelDeployment", _wire({
        "engine": "vllm", "model": "m", "toolCallParser": "none", "tenant": "chat", "storageClass": "gp3",
        "tensorParallel": 2,
        "pool": {"name": "l40s", "instanceType": "g6e.12xlarge", "taints": [{"key": "k", "effect": "NoSchedule"}]},
        "replicas": {"min": 1, "max": 3}}))
    spec = serving_spec("llama", model)
    assert (spec.model.tensor_parallel, spec.model.replicas.max) == (2, 3)
    pool = _inputs("GpuNodePool", _wire({"clusterName": "c", "vpcId": "v", "clusterSecurityGroupId": "sg",
                                         "availabilityZones": ["us-east-1a"], "subnetIds": ["s"],
                                         "instanceType": "p5.48xlarge", "minSize": 2, "maxSize": 2}))
    assert (pool["min_size"], pool["max_size"]) == (2, 2) and isinstance(pool["min_size"], int)


def test_the_sdks_own_provider_leaves_them_floats() -> None:
    """Why the package hosts its own Provider: without it the same inputs fail the components' checks."""
    import pulumi

    from components.k8s.tenancy import tenancy_spec

    plain = ComponentProvider(list(package.COMPONENTS), package.PACKAGE, version=package.VERSION)
    inputs = plain.map_inputs(_wire({"tenants": {"chat": {"gpuQuota": 8, "cpuQuota": "96", "memoryQuota": "1Ti"}}}),
                              plain._component_defs["Tenancy"])
    with pytest.raises(pulumi.InputPropertiesError, match="gpuQuota: expected an integer, got a number 8.0"):
        tenancy_spec("teams", inputs)


def test_the_package_registers_each_component_under_the_type_its_schema_names() -> None:
    """The engine asks the provider to construct `aifactory:index:<name>` (the schema's token); a component imported
    into a program keeps the token the kit's stacks were created with (`aifactory:k8s:<name>` for the Kubernetes
    ones: part of every child's URN, which must not change)."""
    from components.k8s.tenancy import Tenancy
    from infra.synth import read_stack_config, run_program, stack_file

    hosted = {c.__name__: c for c in package.COMPONENTS}
    assert {n: c.pulumi_type for n, c in hosted.items() if hasattr(c, "pulumi_type")} == {
        n: f"aifactory:index:{n}" for n in ("Tenancy", "Gateway", "ModelDeployment", "GpuStack", "Mesh", "Fabric",
                                            "Observability", "Platform")}
    assert Tenancy.pulumi_type == "aifactory:k8s:Tenancy" and issubclass(hosted["Tenancy"], Tenancy)
    tenants = {"tenants": {"chat": {"cpu_quota": "8", "memory_quota": "32Gi"}}}

    def program(_cfg: object) -> None:
        hosted["Tenancy"]("hosted", tenants)
        Tenancy("imported", tenants)

    types = {r.name: r.type for r in run_program("dev", read_stack_config(stack_file("dev")), program).resources}
    assert (types["hosted"], types["imported"]) == ("aifactory:index:Tenancy", "aifactory:k8s:Tenancy")
    assert types["hosted-chat"] == types["imported-chat"] == "kubernetes:core/v1:Namespace"
