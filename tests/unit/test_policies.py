"""Every policy of the pack: at least one violating and one compliant case, exact violations.

Cases run through `policies.runner.run_policies`, i.e. the pack's own validate functions called with
ResourceValidationArgs (inputs) and StackValidationArgs (outputs, property dependencies) built from
stack-export entries, the same path `aifactory policy check` takes.
"""

from __future__ import annotations

from typing import Any

import pytest

from policies.kube import helm_pod_fragments, parse_image, registry_allowed
from policies.pack import POLICIES, by_name
from policies.runner import parse_config, run_policies

PROJECT = "urn:pulumi:test::aifactory::"


def urn(type_: str, name: str) -> str:
    return f"{PROJECT}{type_}::{name}"


def res(type_: str, name: str, inputs: dict[str, Any], *, outputs: dict[str, Any] | None = None,
        deps: dict[str, list[str]] | None = None) -> dict[str, Any]:
    return {"urn": urn(type_, name), "type": type_, "custom": True, "inputs": inputs,
            "outputs": {**inputs, **(outputs or {})}, "propertyDependencies": deps or {}}


def found(policy: str, *resources: dict[str, Any], config: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    violations = run_policies(list(resources), parse_config(config), policies=[by_name()[policy]])
    return [(v.resource_name, v.message) for v in violations]


# --- Kubernetes builders -----------------------------------------------------------------------

NS = "kubernetes:core/v1:Namespace"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
HELM = "kubernetes:helm.sh/v3:Release"
NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
PEER = "kubernetes:security.istio.io/v1:PeerAuthentication"
AUTHZ = "kubernetes:security.istio.io/v1:AuthorizationPolicy"
QUOTA = "kubernetes:core/v1:ResourceQuota"
SERVICE = "kubernetes:core/v1:Service"


def ns(name: str) -> dict[str, Any]:
    return res(NS, name, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def obj(type_: str, name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    api, kind = type_.split(":")[1:]
    return res(type_, f"{namespace}-{name}", {"apiVersion": api, "kind": kind,
                                              "metadata": {"name": name, "namespace": namespace}, "spec": spec})


def container(**over: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "server", "image": "docker.io/vllm/vllm-openai:v0.11.0",
                         "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False}}
    c.update(over)
    return c


def gpu(n: int | str, limit: int | str | None = None, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    return {"requests": {"cpu": "4", resource: str(n)}, "limits": {"cpu": "4", resource: str(limit or n)}}


def pod(**over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container()], "securityContext": {"runAsNonRoot": True}}
    spec.update(over)
    return spec


def deployment(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return obj(DEPLOYMENT, name, namespace, {"replicas": 1, "template": {"spec": spec}})


def helm(name: str, namespace: str, values: dict[str, Any], chart: str = "some-chart") -> dict[str, Any]:
    return res(HELM, name, {"name": name, "namespace": namespace, "chart": chart, "version": "1.0.0",
                            "values": values})


GPU_POD = pod(containers=[container(resources=gpu(1))], nodeSelector={"aifactory.io/pool": "h100"},
              tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])


# --- isolation: tenant namespaces ----------------------------------------------------------------

DENY_ALL = {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def test_default_deny_missing_directions_are_named() -> None:
    ingress_only = obj(NETPOL, "deny", "team-a", {"podSelector": {}, "policyTypes": ["Ingress"]})
    selective = obj(NETPOL, "deny", "team-b", {**DENY_ALL, "podSelector": {"matchLabels": {"app": "x"}}})
    assert found("tenant-default-deny", ns("team-a"), ingress_only, ns("team-b"), selective, ns("monitoring")) == [
        ("team-a", "tenant namespace 'team-a' has no default-deny NetworkPolicy for Egress"),
        ("team-b", "tenant namespace 'team-b' has no default-deny NetworkPolicy for Egress and Ingress"),
    ]


def test_default_deny_one_policy_or_two_comply() -> None:
    split = [obj(NETPOL, "in", "team-b", {"podSelector": {}, "policyTypes": ["Ingress"]}),
             obj(NETPOL, "out", "team-b", {"podSelector": {}, "policyTypes": ["Egress"]})]
    assert found("tenant-default-deny", ns("team-a"), obj(NETPOL, "deny", "team-a", DENY_ALL), ns("team-b"),
                 *split) == []


def test_default_deny_with_allow_rules_is_not_default_deny() -> None:
    allows = obj(NETPOL, "deny", "team-a", {**DENY_ALL, "egress": [{"to": [{"podSelector": {}}]}]})
    assert found("tenant-default-deny", ns("team-a"), allows) == [
        ("team-a", "tenant namespace 'team-a' has no default-deny NetworkPolicy for Egress")]


def test_gateway_namespace_needs_default_deny_and_allow_nothing() -> None:
    gw = "aifactory-gateway"
    assert found("gateway-namespace-default-deny", ns(gw), obj(NETPOL, "deny", gw,
                 {"podSelector": {}, "policyTypes": ["Ingress"]}), ns("team-a")) == [
        (gw, "gateway namespace 'aifactory-gateway' has no default-deny NetworkPolicy for Egress"),
        (gw, "gateway namespace 'aifactory-gateway' has no allow-nothing AuthorizationPolicy"),
    ]
    assert found("gateway-namespace-default-deny", ns(gw), obj(NETPOL, "deny", gw, DENY_ALL),
                 obj(AUTHZ, "allow-nothing", gw, {})) == []
    assert found("gateway-namespace-default-deny", ns("edge"), config={
        "gateway-namespace-default-deny": {"gatewayNamespaces": ["edge"]}}) == [
        ("edge", "gateway namespace 'edge' has no default-deny NetworkPolicy for Egress and Ingress"),
        ("edge", "gateway namespace 'edge' has no allow-nothing AuthorizationPolicy")]


def test_platform_namespaces_come_from_config() -> None:
    assert found("tenant-default-deny", ns("team-a"), config={
        "tenant-default-deny": {"platformNamespaces": ["team-a"]}}) == []


STRICT = {"mtls": {"mode": "STRICT"}}


@pytest.mark.parametrize("resources", [
    [ns("team-a")],
    [obj(PEER, "default", "istio-system", {"mtls": {"mode": "PERMISSIVE"}})],
    [obj(PEER, "default", "team-a", STRICT)],
    [obj(PEER, "default", "istio-system", {**STRICT, "selector": {"matchLabels": {"app": "x"}}})],
])
def test_mesh_strict_mtls_missing(resources: list[dict[str, Any]]) -> None:
    assert found("mesh-strict-mtls", *resources) == [
        ("(stack)", "no mesh-wide PeerAuthentication with mtls.mode STRICT in the root namespace 'istio-system'")]


def test_mesh_strict_mtls_present_with_v1beta1() -> None:
    beta = obj("kubernetes:security.istio.io/v1beta1:PeerAuthentication", "default", "istio-system", STRICT)
    assert found("mesh-strict-mtls", beta) == []


def test_mesh_strict_mtls_not_applicable_without_kubernetes() -> None:
    assert found("mesh-strict-mtls", res("aws:eks/cluster:Cluster", "eks", {})) == []


def test_mtls_downgrade_in_tenant_namespace() -> None:
    weak = obj(PEER, "weak", "team-a", {"mtls": {"mode": "PERMISSIVE"}, "portLevelMtls": {"8000": {"mode": "DISABLE"}}})
    assert found("no-mtls-downgrade", weak) == [
        ("team-a-weak", "PeerAuthentication 'weak' in tenant namespace 'team-a' sets mtls.mode PERMISSIVE"),
        ("team-a-weak", "PeerAuthentication 'weak' in tenant namespace 'team-a' sets portLevelMtls[8000].mode DISABLE"),
    ]


def test_mtls_strict_in_tenant_namespace_complies() -> None:
    assert found("no-mtls-downgrade", obj(PEER, "strict", "team-a", STRICT)) == []


def test_allow_nothing_required_per_tenant() -> None:
    with_rules = obj(AUTHZ, "callers", "team-a", {"rules": [{"from": [{"source": {"principals": ["x"]}}]}]})
    assert found("tenant-allow-nothing", ns("team-a"), with_rules, ns("team-b"), obj(AUTHZ, "none", "team-b", {})) == [
        ("team-a", "tenant namespace 'team-a' has no allow-nothing AuthorizationPolicy")]


def test_gpu_quota_required_per_tenant() -> None:
    cpu_only = obj(QUOTA, "quota", "team-a", {"hard": {"requests.cpu": "64"}})
    zero = obj(QUOTA, "quota", "team-b", {"hard": {"requests.nvidia.com/gpu": "0"}})
    assert found("tenant-gpu-quota", ns("team-a"), cpu_only, ns("team-b"), zero) == [
        ("team-a", "tenant namespace 'team-a' has no ResourceQuota limiting requests.nvidia.com/gpu")]


# --- isolation: pods ---------------------------------------------------------------------------------

def test_privileged_pod_every_problem() -> None:
    bad = pod(hostNetwork=True, hostPID=True, volumes=[{"name": "dev", "hostPath": {"path": "/dev"}}],
              containers=[container(securityContext={"privileged": True, "runAsNonRoot": True,
                                                     "capabilities": {"add": ["IPC_LOCK", "SYS_ADMIN"]}})])
    assert found("no-privileged-pods", deployment("x", "team-a", bad)) == [
        ("team-a-x", "spec.template.spec: hostNetwork: true"),
        ("team-a-x", "spec.template.spec: hostPID: true"),
        ("team-a-x", "spec.template.spec: volume 'dev' mounts hostPath /dev"),
        ("team-a-x", "spec.template.spec: container 'server' is privileged"),
        ("team-a-x", "spec.template.spec: container 'server' adds capabilities IPC_LOCK, SYS_ADMIN"),
    ]


def test_privileged_allowed_in_agent_namespace_and_no_capability_by_default() -> None:
    agent = pod(hostNetwork=True, containers=[container(securityContext={"privileged": True})])
    rdma = pod(containers=[container(securityContext={"runAsNonRoot": True, "capabilities": {"add": ["IPC_LOCK"]}})])
    assert found("no-privileged-pods", deployment("dcgm", "gpu-operator", agent),
                 deployment("llm", "team-a", rdma)) == [
        ("team-a-llm", "spec.template.spec: container 'server' adds capabilities IPC_LOCK")]
    assert found("no-privileged-pods", deployment("llm", "team-a", rdma), config={
        "no-privileged-pods": {"allowedCapabilities": ["IPC_LOCK"]}}) == []


def test_privileged_in_helm_values_and_lws_worker() -> None:
    release = helm("bad", "team-a", {"server": {"image": {"repository": "vllm/vllm-openai", "tag": "v1"},
                                                "securityContext": {"privileged": True}}})
    lws = obj(LWS, "llm", "team-a", {"leaderWorkerTemplate": {"size": 2, "leaderTemplate": {"spec": pod()},
                                                              "workerTemplate": {"spec": pod(hostIPC=True)}}})
    assert found("no-privileged-pods", release, lws) == [
        ("bad", "values.server: container 'server' is privileged"),
        ("team-a-llm", "spec.leaderWorkerTemplate.workerTemplate.spec: hostIPC: true"),
    ]


def test_run_as_non_root() -> None:
    unset = pod(securityContext={}, containers=[container(securityContext={})])
    root = pod(containers=[container(securityContext={"runAsUser": 0})])
    chart_root = helm("agent", "team-a", {"podSecurityContext": {"runAsUser": 0}, "image": "nvcr.io/nvidia/x:1"})
    assert found("pods-run-as-non-root", deployment("a", "team-a", unset), deployment("b", "team-a", root),
                 chart_root) == [
        ("agent", "values: container 'values' runs as root"),
        ("team-a-a", "spec.template.spec: container 'server' does not set runAsNonRoot: true"),
        ("team-a-b", "spec.template.spec: container 'server' runs as root"),
    ]


def test_run_as_non_root_compliant_pod_and_chart_defaults() -> None:
    pod_level = pod(containers=[container(securityContext={})])  # inherits the pod's runAsNonRoot
    chart_default = helm("agent", "team-a", {"image": {"repository": "nvcr.io/nvidia/x", "tag": "1"}})
    assert found("pods-run-as-non-root", deployment("a", "team-a", pod_level), chart_default,
                 deployment("root-agent", "gpu-operator", pod(securityContext={"runAsUser": 0}))) == []


def test_gpu_limits_equal_requests_including_mig() -> None:
    unequal = pod(containers=[container(resources=gpu(2, 1))])
    mig_no_limit = pod(containers=[container(resources={"requests": {"nvidia.com/mig-1g.10gb": "1"}})])
    assert found("gpu-limits-equal-requests", deployment("a", "t", unequal), deployment("b", "t", mig_no_limit)) == [
        ("t-a", "spec.template.spec: container 'server' requests nvidia.com/gpu: 2 but limits it to 1"),
        ("t-b", "spec.template.spec: container 'server' requests nvidia.com/mig-1g.10gb: 1 without a limit"),
    ]


def test_gpu_limits_equal_requests_compliant() -> None:
    mig = pod(containers=[container(resources=gpu(1, resource="nvidia.com/mig-1g.10gb"))])
    assert found("gpu-limits-equal-requests", deployment("a", "t", GPU_POD), deployment("b", "t", mig)) == []


def test_gpu_pods_on_gpu_pools() -> None:
    stray = pod(containers=[container(resources=gpu(1))], tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert found("gpu-pods-on-gpu-pools", deployment("a", "t", stray)) == [
        ("t-a", "spec.template.spec: GPU pod does not select a GPU pool by node label 'aifactory.io/pool'"),
        ("t-a", "spec.template.spec: GPU pod tolerates non-GPU taints: dedicated"),
    ]


def test_gpu_pods_on_gpu_pools_by_selector_or_affinity() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "aifactory.io/pool", "operator": "In", "values": ["h100"]}]}]}}}
    by_affinity = pod(containers=[container(resources=gpu(1))], affinity=affinity)
    assert found("gpu-pods-on-gpu-pools", deployment("a", "t", GPU_POD), deployment("b", "t", by_affinity)) == []
    assert by_name()["gpu-pods-on-gpu-pools"].enforcement_level.value == "advisory"


def test_cpu_pods_avoid_gpu_nodes() -> None:
    tolerates = pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    everything = pod(tolerations=[{"operator": "Exists"}])
    assert found("cpu-pods-avoid-gpu-nodes", deployment("a", "t", tolerates), deployment("b", "t", everything)) == [
        ("t-a", "spec.template.spec: pod without GPUs tolerates the GPU taint 'nvidia.com/gpu'"),
        ("t-b", "spec.template.spec: pod without GPUs tolerates the GPU taint '*'"),
    ]


def test_cpu_pods_avoid_gpu_nodes_compliant() -> None:
    agent = pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    assert found("cpu-pods-avoid-gpu-nodes", deployment("a", "t", GPU_POD), deployment("b", "t", pod()),
                 deployment("dcgm", "gpu-operator", agent)) == []


def test_external_services_only_for_the_gateway() -> None:
    lb = obj(SERVICE, "llm", "team-a", {"type": "LoadBalancer", "ports": [{"port": 80}]})
    gw = obj(SERVICE, "gw", "aifactory-gateway", {"type": "LoadBalancer", "ports": [{"port": 80}]})
    internal = obj(SERVICE, "llm-internal", "team-a", {"ports": [{"port": 80}]})
    assert found("external-services-gateway-only", lb, gw, internal) == [
        ("team-a-llm", "Service 'llm' in namespace 'team-a' is of type LoadBalancer; only the gateway "
                       "(aifactory-gateway) is exposed outside the cluster")]


def test_images_pinned() -> None:
    latest = pod(containers=[container(image="nvcr.io/nvidia/tritonserver:latest"), container(name="side",
                                                                                                image="nvcr.io/x")])
    chart = helm("c", "t", {"image": {"repository": "nvcr.io/nvidia/x", "tag": "latest"}})
    assert found("images-pinned", deployment("a", "t", latest), chart) == [
        ("c", "values: container 'values' image 'nvcr.io/nvidia/x:latest' uses the mutable tag 'latest'"),
        ("t-a", "spec.template.spec: container 'server' image 'nvcr.io/nvidia/tritonserver:latest' uses the "
                "mutable tag 'latest'"),
        ("t-a", "spec.template.spec: container 'side' image 'nvcr.io/x' has no tag or digest"),
    ]


def test_images_pinned_by_tag_digest_or_chart_version() -> None:
    digest = pod(containers=[container(image="registry.k8s.io/pause@sha256:" + "a" * 64)])
    chart = helm("c", "t", {"image": {"repository": "nvcr.io/nvidia/x"}})  # the chart's own appVersion
    nvidia = helm("g", "t", {"driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "550.1"}})
    assert found("images-pinned", deployment("a", "t", GPU_POD), deployment("b", "t", digest), chart, nvidia) == []


def test_images_from_allowed_registries() -> None:
    bad = pod(containers=[container(image="evil.example.com/miner:1.0"), container(name="hub", image="nginx:1.27")])
    assert found("images-from-allowed-registries", deployment("a", "t", bad)) == [
        ("t-a", "spec.template.spec: container 'server' image 'evil.example.com/miner:1.0' is not from an "
                "allowed registry"),
        ("t-a", "spec.template.spec: container 'hub' image 'nginx:1.27' is not from an allowed registry"),
    ]
    assert found("images-from-allowed-registries", deployment("a", "t", bad), config={
        "images-from-allowed-registries": {"allowedRegistries": ["evil.example.com", "docker.io/library"]}}) == []


def test_images_from_allowed_registries_compliant() -> None:
    ecr = pod(containers=[container(image="602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/efa:v0.5.6")])
    assert found("images-from-allowed-registries", deployment("a", "t", GPU_POD), deployment("b", "t", ecr)) == []


@pytest.mark.parametrize(("ref", "registry", "path", "tag", "digest"), [
    ("nginx", "docker.io", "library/nginx", "", ""),
    ("vllm/vllm-openai:v0.11.0", "docker.io", "vllm/vllm-openai", "v0.11.0", ""),
    ("localhost:5000/a/b:1", "localhost:5000", "a/b", "1", ""),
    ("nvcr.io/nvidia/x@sha256:ab", "nvcr.io", "nvidia/x", "", "sha256:ab"),
])
def test_parse_image(ref: str, registry: str, path: str, tag: str, digest: str) -> None:
    image = parse_image(ref)
    assert (image.registry, image.path, image.tag, image.digest) == (registry, path, tag, digest)


def test_registry_prefix_matches_at_path_boundary() -> None:
    assert registry_allowed(parse_image("docker.io/vllm/x:1"), ["docker.io/vllm"])
    assert not registry_allowed(parse_image("docker.io/vllmevil/x:1"), ["docker.io/vllm"])


def test_helm_pod_fragments_paths() -> None:
    values = {"tolerations": [], "driver": {"image": "nvcr.io/nvidia/driver:1"}, "extra": {"containers": [{}]},
              "clusterRole": {"rules": [{"resources": ["pods"], "verbs": ["get"]}]}, "hostNetwork": "auto"}
    assert [path for path, _ in helm_pod_fragments(values)] == ["", "driver", "extra"]


def test_gpu_quantities_compare_as_kubernetes_does() -> None:
    engine_numbers = pod(containers=[container(resources={"requests": {"nvidia.com/gpu": "8"},
                                                          "limits": {"nvidia.com/gpu": 8.0}})])
    assert found("gpu-limits-equal-requests", deployment("a", "t", engine_numbers)) == []


# --- fabric ------------------------------------------------------------------------------------------

LT = "aws:ec2/launchTemplate:LaunchTemplate"
NG = "aws:eks/nodeGroup:NodeGroup"
SG = "aws:ec2/securityGroup:SecurityGroup"
PG = "aws:ec2/placementGroup:PlacementGroup"
SUBNET = "aws:ec2/subnet:Subnet"


def interfaces(cards: int, *, efa_sg: str = "sg-efa") -> list[dict[str, Any]]:
    return [{"networkCardIndex": c, "deviceIndex": 0, "interfaceType": "efa" if c == 0 else "efa-only",
             "securityGroups": ["sg-cluster", efa_sg] if c == 0 else [efa_sg]} for c in range(cards)]


# Network cards per type as EC2 publishes them (tests/fixtures/aws_instance_types.yaml), written here by hand so
# a compliant layout never comes from the catalog the policy checks.
NETWORK_CARDS = {"p4d.24xlarge": 4, "p5.48xlarge": 32, "p5en.48xlarge": 16, "p6-b200.48xlarge": 8}


def efa_pool(name: str, itype: str, *, nics: list[dict[str, Any]] | None = None, lt_extra: dict[str, Any] | None = None,
             subnets: tuple[str, ...] = ("subnet-a",)) -> list[dict[str, Any]]:
    lt_inputs = {"networkInterfaces": nics if nics is not None else interfaces(NETWORK_CARDS[itype]),
                 "metadataOptions": {"httpTokens": "required"}, **(lt_extra or {})}
    lt = res(LT, f"{name}-lt", lt_inputs, outputs={"id": f"lt-{name}"})
    ng = res(NG, f"{name}-ng", {"instanceTypes": [itype], "subnetIds": list(subnets),
                                "launchTemplate": {"id": f"lt-{name}", "version": "1"}},
             deps={"launchTemplate": [lt["urn"]]})
    return [lt, ng]


SELF_ALL = {"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}


def efa_sg(**over: Any) -> dict[str, Any]:
    return res(SG, "efa-sg", {"ingress": [SELF_ALL], "egress": [SELF_ALL], **over}, outputs={"id": "sg-efa"})


def test_efa_layout_count_and_types() -> None:
    short = interfaces(32)[:31]
    wrong = interfaces(4)
    wrong[1]["interfaceType"] = "efa"
    assert found("efa-interface-layout", *efa_pool("h100", "p5.48xlarge", nics=short),
                 *efa_pool("a100", "p4d.24xlarge", nics=wrong)) == [
        ("a100-lt", "a100-lt (p4d.24xlarge): network card 1: efa at device index 0; expected efa-only at device "
                    "index 0"),
        ("h100-lt", "h100-lt (p5.48xlarge): 31 network interfaces; p5.48xlarge has 32 network cards, one "
                    "interface each"),
    ]


@pytest.mark.parametrize("itype", ["p5.48xlarge", "p5en.48xlarge", "p4d.24xlarge", "p6-b200.48xlarge"])
def test_efa_layout_compliant(itype: str) -> None:
    assert found("efa-interface-layout", *efa_pool("pool", itype)) == []


def test_efa_security_group_extra_rules() -> None:
    open_sg = efa_sg(ingress=[SELF_ALL, {"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["10.0.0.0/8"],
                                         "description": "ssh"}], egress=[])
    extra = res("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "efa-extra",
                {"securityGroupId": "sg-efa", "ipProtocol": "-1", "cidrIpv4": "10.0.0.0/16"})
    assert found("efa-security-group-self-only", *efa_pool("h100", "p5.48xlarge"), open_sg, extra) == [
        ("efa-sg", "h100-lt: security group efa-sg: ingress rule 'ssh' allows traffic other than the group itself"),
        ("efa-sg", "h100-lt: security group efa-sg: ingress rule 'efa-extra' allows traffic other than the group "
                   "itself"),
        ("efa-sg", "h100-lt: security group efa-sg: no egress rule allows all traffic with itself (EFA needs every "
                   "protocol)"),
    ]


def test_efa_security_group_unshared() -> None:
    nics = interfaces(4)
    nics[3]["securityGroups"] = ["sg-other"]
    assert found("efa-security-group-self-only", *efa_pool("a100", "p4d.24xlarge", nics=nics), efa_sg()) == [
        ("a100-lt", "a100-lt: no security group is shared by every EFA interface")]


def test_efa_security_group_self_only_complies() -> None:
    assert found("efa-security-group-self-only", *efa_pool("h100", "p5.48xlarge"), efa_sg()) == []


def test_efa_single_az() -> None:
    subnets = [res(SUBNET, "a", {"availabilityZone": "us-east-1a"}, outputs={"id": "subnet-a"}),
               res(SUBNET, "b", {"availabilityZone": "us-east-1b"}, outputs={"id": "subnet-b"})]
    two_zones = efa_pool("h100", "p5.48xlarge", subnets=("subnet-a", "subnet-b"))
    assert found("efa-pool-single-az", *subnets, *two_zones) == [
        ("h100-ng", "EFA node group h100-ng spans 2 zones/subnets (us-east-1a, us-east-1b); EFA traffic stays "
                    "within one availability zone")]
    assert found("efa-pool-single-az", *subnets, *efa_pool("h100", "p5.48xlarge")) == []


def test_efa_placement_group() -> None:
    spread = res(PG, "pg", {"strategy": "spread"}, outputs={"name": "pg-1"})
    placed = efa_pool("b", "p5.48xlarge", lt_extra={"placement": {"groupName": "pg-1"}})
    assert found("efa-pool-placement-group", *efa_pool("a", "p5.48xlarge"), spread, *placed) == [
        ("a-lt", "a-lt: EFA launch template on unreserved capacity has no placement group"),
        ("b-lt", "b-lt: placement group pg has strategy 'spread', not 'cluster'"),
    ]


def test_efa_placement_cluster_or_reservation_complies() -> None:
    cluster = res(PG, "pg", {"strategy": "cluster"}, outputs={"name": "pg-1"})
    reserved = {"capacityReservationSpecification": {"capacityReservationTarget": {"capacityReservationId": "cr-1"}},
                "instanceMarketOptions": {"marketType": "capacity-block"}}
    assert found("efa-pool-placement-group", cluster, *efa_pool("a", "p5.48xlarge", lt_extra={
        "placement": {"groupName": "pg-1"}}), *efa_pool("b", "p5.48xlarge", lt_extra=reserved)) == []
    assert by_name()["efa-pool-placement-group"].enforcement_level.value == "advisory"


def plugin(types: list[str]) -> dict[str, Any]:
    return helm("efa", "aifactory-system", {"supportedInstanceLabels": {
        "keys": ["node.kubernetes.io/instance-type"], "values": types}}, chart="aws-efa-k8s-device-plugin")


def test_efa_device_plugin_covers_pools() -> None:
    pools = [*efa_pool("a", "p5.48xlarge"), *efa_pool("b", "p5en.48xlarge")]
    assert found("efa-device-plugin-covers-pools", *pools) == [
        ("(stack)", "EFA pools (p5.48xlarge, p5en.48xlarge) but no aws-efa-k8s-device-plugin Helm release")]
    assert found("efa-device-plugin-covers-pools", *pools, plugin(["p5.48xlarge"])) == [
        ("efa", "efa: supportedInstanceLabels.values lacks p5en.48xlarge: nodes of those pools get no plugin pod "
                "and NCCL falls back to TCP")]
    assert found("efa-device-plugin-covers-pools", *pools, plugin(["p5.48xlarge", "p5en.48xlarge"])) == []


def test_efa_env_requires_devices() -> None:
    env = [{"name": "FI_PROVIDER", "value": "efa"}]
    without = pod(containers=[container(env=env, resources=gpu(8))])
    with_efa = pod(containers=[container(env=env, resources={
        "requests": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"},
        "limits": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}})])
    assert found("efa-pods-request-devices", deployment("a", "t", without), deployment("b", "t", with_efa)) == [
        ("t-a", "spec.template.spec: container 'server' sets FI_PROVIDER=efa but requests no vpc.amazonaws.com/efa")]


# --- AWS security ----------------------------------------------------------------------------------

def test_imdsv2() -> None:
    assert found("launch-template-imdsv2", res(LT, "a", {"metadataOptions": {"httpTokens": "optional"}}),
                 res(LT, "b", {}), res(LT, "c", {"metadataOptions": {"httpTokens": "required"}})) == [
        ("a", "metadataOptions.httpTokens is optional; IMDSv1 is reachable"),
        ("b", "metadataOptions.httpTokens is unset; IMDSv1 is reachable"),
    ]


def test_ebs_encrypted() -> None:
    lt = res(LT, "a", {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"encrypted": "false"}}]})
    vol = res("aws:ebs/volume:Volume", "v", {"size": 10})
    good = res(LT, "b", {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"encrypted": "true"}}]})
    assert found("ebs-encrypted", lt, vol, good) == [
        ("a", "blockDeviceMappings[0] (/dev/xvda) is not encrypted"), ("v", "EBS volume is not encrypted")]


EKS = "aws:eks/cluster:Cluster"


def test_eks_endpoint() -> None:
    assert found("eks-endpoint-restricted", res(EKS, "a", {"vpcConfig": {}}),
                 res(EKS, "b", {"vpcConfig": {"endpointPublicAccess": True, "publicAccessCidrs": ["0.0.0.0/0"]}}),
                 res(EKS, "c", {"vpcConfig": {"endpointPublicAccess": False}}),
                 res(EKS, "d", {"vpcConfig": {"publicAccessCidrs": ["203.0.113.0/24"]}})) == [
        ("a", "the API endpoint is public (endpointPublicAccess defaults to true) without publicAccessCidrs"),
        ("b", "the public API endpoint allows 0.0.0.0/0"),
    ]


def test_eks_secrets_encryption_and_logging() -> None:
    good = {"encryptionConfig": {"resources": ["secrets"], "provider": {"keyArn": "arn:aws:kms:k"}},
            "enabledClusterLogTypes": ["api", "audit", "authenticator"]}
    bad = {"encryptionConfig": {"resources": ["secrets"], "provider": {}}, "enabledClusterLogTypes": ["api"]}
    assert found("eks-secrets-encryption", res(EKS, "a", bad), res(EKS, "b", good)) == [
        ("a", "encryptionConfig does not encrypt 'secrets' with a KMS key")]
    assert found("eks-control-plane-logging", res(EKS, "a", bad), res(EKS, "b", good)) == [
        ("a", "control-plane log types not enabled: audit, authenticator")]


def test_no_public_ingress() -> None:
    sg = res(SG, "node", {"ingress": [{"protocol": "tcp", "cidrBlocks": ["0.0.0.0/0"], "description": "ssh"}],
                          "egress": [{"protocol": "-1", "cidrBlocks": ["0.0.0.0/0"]}]})
    rule = res("aws:ec2/securityGroupRule:SecurityGroupRule", "r", {"type": "ingress", "cidrBlocks": ["0.0.0.0/0"]})
    v6 = res("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "v6", {"cidrIpv6": "::/0"})
    private = res(SG, "ok", {"ingress": [{"protocol": "tcp", "cidrBlocks": ["10.0.0.0/16"]}],
                             "egress": [{"protocol": "-1", "cidrBlocks": ["0.0.0.0/0"]}]})
    assert found("no-public-ingress", sg, rule, v6, private) == [
        ("node", "ingress rule 'ssh' allows 0.0.0.0/0"), ("r", "ingress rule allows 0.0.0.0/0"),
        ("v6", "ingress rule allows ::/0")]


BUCKET = "aws:s3/bucket:Bucket"


def test_s3_public_access_block() -> None:
    b1, b2 = res(BUCKET, "models", {"bucket": "models"}), res(BUCKET, "logs", {"bucket": "logs"})
    flags = dict.fromkeys(("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"), True)
    full = res("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "models-pab", {"bucket": "models", **flags},
               deps={"bucket": [b1["urn"]]})
    partial = res("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "logs-pab",
                  {"bucket": "logs", **flags, "restrictPublicBuckets": False})
    assert found("s3-block-public-access", b1, b2, full, partial) == [
        ("logs", "bucket logs has no BucketPublicAccessBlock with all four blocks set")]


def test_s3_encrypted() -> None:
    b1, b2 = res(BUCKET, "models", {"bucket": "models"}), res(BUCKET, "logs", {"bucket": "logs"})
    inline = res(BUCKET, "old", {"serverSideEncryptionConfiguration": {"rule": {
        "applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}}})
    sse = res("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration", "models-sse",
              {"bucket": "models", "rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms"}}]})
    assert found("s3-encrypted", b1, b2, inline, sse) == [
        ("logs", "bucket logs has no server-side encryption configuration")]


def test_iam_no_admin_wildcard() -> None:
    admin = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}'
    doc_args = {"statements": [{"actions": ["s3:GetObject"], "resources": ["*"]},
                               {"actions": ["*"], "resources": ["*"]}]}
    scoped = '{"Statement": {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "*"}}'
    deny = '{"Statement": [{"Effect": "Deny", "Action": "*", "Resource": "*"}]}'
    assert found("iam-no-admin-wildcard", res("aws:iam/policy:Policy", "admin", {"policy": admin}),
                 res("aws:iam/role:Role", "role", {"inlinePolicies": [{"name": "x", "policy": doc_args}]}),
                 res("aws:iam/rolePolicy:RolePolicy", "scoped", {"policy": scoped}),
                 res("aws:iam/policy:Policy", "deny", {"policy": deny})) == [
        ("admin", "policy statement 0 allows '*' on '*'"),
        ("role", "inlinePolicies['x'] statement 1 allows '*' on '*'"),
    ]


# --- the pack as a whole ---------------------------------------------------------------------------

def test_every_policy_documents_itself() -> None:
    for p in POLICIES:
        assert p.description and p.remediation_steps and p.severity is not None, p.name
        assert p.enforcement_level is not None and p.enforcement_level.value in ("mandatory", "advisory"), p.name
    advisory = sorted(p.name for p in POLICIES if p.enforcement_level.value == "advisory")
    assert advisory == ["efa-pool-placement-group", "gpu-pods-on-gpu-pools"]


def test_config_schema_defaults_are_the_documented_allow_lists() -> None:
    schema = by_name()["no-privileged-pods"].config_schema.properties
    assert schema["agentNamespaces"]["default"] == ["aifactory-system", "gpu-operator", "istio-system",
                                                    "kube-system", "monitoring", "nvidia-network-operator"]
    assert schema["allowedCapabilities"] == {"type": "array", "items": {"type": "string"}, "default": [],
                                             "description": schema["allowedCapabilities"]["description"]}


ADDON = "aws:eks/addon:Addon"


def test_eks_network_policy_enforced() -> None:
    unset = res(ADDON, "cni", {"addonName": "vpc-cni"})
    off = res(ADDON, "cni-off", {"addonName": "vpc-cni", "configurationValues": '{"enableNetworkPolicy": "false"}'})
    boolean = res(ADDON, "cni-bool", {"addonName": "vpc-cni", "configurationValues": '{"enableNetworkPolicy": true}'})
    why = "NetworkPolicies are accepted but not enforced"
    assert found("eks-network-policy-enforced", unset, off, boolean) == [
        ("cni", f"configurationValues.enableNetworkPolicy is unset; {why}"),
        ("cni-bool", f"configurationValues.enableNetworkPolicy is True; {why}"),
        ("cni-off", f"configurationValues.enableNetworkPolicy is 'false'; {why}"),
    ]


def test_eks_network_policy_enforced_compliant() -> None:
    values = '{"enableNetworkPolicy": "true", "env": {"ENABLE_PREFIX_DELEGATION": "true"}}'
    on = res(ADDON, "cni", {"addonName": "vpc-cni", "configurationValues": values})
    other = res(ADDON, "coredns", {"addonName": "coredns"})
    assert found("eks-network-policy-enforced", on, other) == []


def test_tenant_objects_in_a_platform_namespace_are_mandatory_violations() -> None:
    """What the kit made of a tenant named kube-system before config validation caught it: the real program with
    the tenant's namespace forced to kube-system (bypassing parse), then the pack."""
    import dataclasses

    from infra.program import program
    from infra.synth import read_stack_config, run_program, stack_file, state_export
    from policies.runner import state_resources

    def forced(cfg: Any) -> None:
        tenants = {n: dataclasses.replace(t, namespace="kube-system") for n, t in cfg.tenants.items()}
        program(dataclasses.replace(cfg, tenants=tenants))

    result = run_program("dev", read_stack_config(stack_file("dev")), forced)
    violations = [v for v in run_policies(state_resources(state_export(result)))
                  if v.policy == "tenant-outside-platform-namespaces"]
    assert {v.enforcement for v in violations} == {"mandatory"}
    kinds = {v.message.split(" ", 1)[0] for v in violations}
    assert {"Namespace", "ResourceQuota", "LimitRange", "NetworkPolicy", "StatefulSet"} <= kinds, kinds
    assert "Namespace 'kube-system' of tenant 'demo' is the namespace 'kube-system', which belongs to the platform" \
        in [v.message for v in violations]
    assert found("tenant-outside-platform-namespaces", res(
        "kubernetes:core/v1:ConfigMap", "c", {"metadata": {"name": "c", "namespace": "team-a",
                                                           "labels": {"aifactory.io/tenant": "a"}}})) == []
    # A PersistentVolume is cluster-scoped (core/v1 API: no metadata.namespace), so a tenant's volume is in no
    # namespace at all, not in "default"
    assert found("tenant-outside-platform-namespaces", res(
        "kubernetes:core/v1:PersistentVolume", "pv", {"metadata": {"name": "pv",
                                                                   "labels": {"aifactory.io/tenant": "a"}}})) == []
