"""Fabric: the data-plane device plugins and networks that multi-GPU and multi-node serving needs.

EFA (AWS): the aws-efa-k8s-device-plugin, its supported instance types set explicitly from the
configured EFA pools (the chart's built-in allow-list lags new types, and a node without the plugin
makes NCCL fall back to TCP silently), tolerating the pools' taints.

InfiniBand (existing clusters): the NVIDIA network operator, a NicClusterPolicy (DOCA driver unless
the hosts ship OFED, secondary network with Multus, nv-ipam) and the RDMA network model pods attach
to: IPoIB (the RDMA shared device plugin hands out `rdma/<name>`) or SR-IOV (virtual functions,
`nvidia.com/<name>`). `rdma_networks_annotation` and `rdma_pod_resources` are what serving uses.

Rails: every compute HCA of the servers is a rail (infiniband.interfaces, by default the catalog's rails, e.g.
8 x ConnectX-7 NDR on a DGX H100). Each rail gets its own network attachment; with SR-IOV also its own RDMA
resource (`<rdmaResourceName>_<interface>`), so a pod holds exactly one virtual function per rail instead of
whatever VFs one pooled resource hands out. GPU-NIC affinity: NCCL pairs each GPU with its nearest HCA from the
PCI topology it reads in the pod (NCCL_IB_HCA lists every rail; serving.py), and the SR-IOV device plugin
reports each VF's NUMA node to the kubelet's Topology Manager (sriov-network-device-plugin, topology hints);
the IPoIB shared device plugin exposes all rails to the pod and has no per-device topology.

Fabric takes its own `args` (FabricArgs: the EFA pools, or the InfiniBand pools and network), so a platform team
can use it without the kit's stack config; infra.component_args maps PlatformConfig to them. The EFA plugin runs
in the kit's system namespace (aifactory-system), which must exist (Platform creates it).
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired (and the package analyzer the types) from
# evaluated annotations.
import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, Protocol, TypedDict

import pulumi
import pulumi_kubernetes as k8s

from components import catalog
from components.k8s import naming, versions
from components.k8s.defaults import DEFAULT_KUBERNETES_VERSION, IPAM_BLOCK_SIZE
from components.k8s.gpu_stack import pool_tolerations
from components.k8s.namespaces import create_namespace, namespace_labels
from components.k8s.settings import InfinibandSettings, NodePool, Taint, infiniband_settings
from components.nodes import TAINT_EFFECTS, TaintArgs
from components.validation import Problems, check_shape
from components.vocabulary import POOL_LABEL

__all__ = [
    "TYPE",
    "EfaPoolArgs",
    "FabricInfinibandArgs",
    "FabricArgs",
    "FabricView",
    "FabricSpec",
    "fabric_spec",
    "EFA_RELEASE_NAME",
    "NETWORK_OPERATOR_RELEASE_NAME",
    "INSTANCE_TYPE_LABEL",
    "MELLANOX_VENDOR_ID",
    "NIC_CLUSTER_POLICY_NAME",
    "IP_POOL_NAME",
    "NETWORKS_ANNOTATION",
    "DEFAULT_SRIOV_NUM_VFS",
    "efa_instance_types",
    "efa_plugin_values",
    "network_operator_values",
    "rdma_network_names",
    "rdma_networks_annotation",
    "rdma_pod_resources",
    "sriov_rail_resource",
    "nic_cluster_policy",
    "ip_pool",
    "rdma_network_objects",
    "Fabric",
]

TYPE = "aifactory:k8s:Fabric"  # the type token of the kit's existing stacks (part of every child's URN)
EFA_RELEASE_NAME = "aws-efa-k8s-device-plugin"
NETWORK_OPERATOR_RELEASE_NAME = "network-operator"
WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"
TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds"
NIC_CLUSTER_POLICY_READY_SECONDS = 3600  # the DOCA driver container compiles and loads its modules on every IB node
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
MELLANOX_VENDOR_ID = "15b3"
NIC_CLUSTER_POLICY_NAME = "nic-cluster-policy"  # the operator reconciles only this name
IP_POOL_NAME = "aifactory-rdma"
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
DEFAULT_SRIOV_NUM_VFS = 8  # virtual functions per port: one per GPU of an 8-GPU server
SRIOV_RESOURCE_PREFIX = "nvidia.com"
SRIOV_CAPABLE_LABEL = "feature.node.kubernetes.io/network-sriov.capable"  # set by node feature discovery


class EfaPoolArgs(TypedDict):
    """A pool of EFA nodes the device plugin must run on."""

    instance_type: str
    """The nodes' instance type (the plugin's supported types are set from it)."""
    taints: NotRequired[list[TaintArgs]]
    """The nodes' taints, which the plugin tolerates. Default: none (nvidia.com/gpu is always tolerated)."""


class FabricInfinibandArgs(TypedDict):
    """The InfiniBand data plane: the NVIDIA network operator and the RDMA network of the listed pools."""

    pools: list[str]
    """The InfiniBand pools (aifactory.io/pool node label values) the operator's components run on."""
    network: NotRequired[str]
    """ipoib or sriov. Default: ipoib."""
    interfaces: NotRequired[list[str]]
    """The rails' netdevs, one network attachment each. Default: [ib0]."""
    ip_range: NotRequired[str]
    """The nv-ipam pool of the RDMA network. Default: 192.168.100.0/22."""
    hca_device_ids: NotRequired[list[str]]
    """PCI device ids of the HCAs. Default: [101b] (ConnectX-6); ConnectX-7 is 1021."""
    rdma_resource_name: NotRequired[str]
    """Default: rdma_shared_device_a."""
    rdma_hca_max: NotRequired[int]
    """Pods that may share one HCA (RDMA shared device plugin). Default: 63."""
    hosts_have_ofed: NotRequired[bool]
    """The hosts bring MLNX OFED/DOCA. Default: false (the operator deploys the DOCA driver)."""
    hcas: NotRequired[list[str]]
    """The rails' RDMA devices (NCCL_IB_HCA), one per interface. Default: none."""


class FabricArgs(TypedDict):
    """Arguments of a Fabric."""

    efa_pools: NotRequired[dict[str, EfaPoolArgs]]
    """The EFA pools, by name. Default: none (no EFA device plugin)."""
    infiniband: NotRequired[FabricInfinibandArgs]
    """Default: none (no network operator)."""
    kubernetes_version: NotRequired[str]
    """The cluster's Kubernetes minor version (the Pod Security labels' version). Default: 1.35."""


class FabricView(Protocol):
    """What the build functions read: Fabric's FabricSpec (from its args), or the kit's PlatformConfig."""

    @property
    def kubernetes_version(self) -> str: ...

    @property
    def efa_pools(self) -> list[NodePool]: ...

    @property
    def infiniband_pools(self) -> list[NodePool]: ...

    @property
    def infiniband(self) -> InfinibandSettings | None: ...


@dataclass(frozen=True)
class FabricSpec:
    """FabricArgs with every default applied (a FabricView). Pools carry only what the fabric reads."""

    efa_pools: list[NodePool] = field(default_factory=list)
    infiniband_pools: list[NodePool] = field(default_factory=list)
    infiniband: InfinibandSettings | None = None
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION


def _taints(taints: list[TaintArgs]) -> tuple[Taint, ...]:
    return tuple(Taint(t["key"], t["effect"], t.get("value", "")) for t in taints)  # type: ignore[arg-type]


def fabric_spec(name: str, args: FabricArgs) -> FabricSpec:
    """Validate `args` and resolve every default; raises pulumi.InputPropertiesError with property paths."""
    check_shape("Fabric", name, args, FabricArgs)  # typos, unknown keys, wrong types: before any read
    problems = Problems("Fabric", name)
    efa = args.get("efa_pools") or {}
    for key, pool in efa.items():
        inst = catalog.CATALOG.get(pool["instance_type"])
        if inst is None or not inst.supports_efa:
            problems.add(f"efaPools.{key}.instanceType", f"{pool['instance_type']!r} has no EFA; EFA types: "
                                                         f"{', '.join(catalog.efa_types())}")
        for i, t in enumerate(pool.get("taints") or ()):
            if t["effect"] not in TAINT_EFFECTS:
                problems.add(f"efaPools.{key}.taints[{i}].effect",
                             f"{t['effect']!r} is not allowed; choose one of: {', '.join(TAINT_EFFECTS)}")
    ib_args = args.get("infiniband")
    if ib_args is not None:
        if ib_args.get("network", "ipoib") not in ("ipoib", "sriov"):
            problems.add("infiniband.network", f"{ib_args['network']!r} is not allowed; choose one of: ipoib, sriov")
        try:
            ipaddress.ip_network(ib_args.get("ip_range", "192.168.100.0/22"))
        except ValueError:
            problems.add("infiniband.ipRange", f"{ib_args['ip_range']!r} is not a CIDR such as 192.168.100.0/22")
        if not ib_args["pools"]:
            problems.add("infiniband.pools", "must list at least one pool")
    problems.raise_any()
    ib = None
    if ib_args is not None:
        ib = infiniband_settings(ib_args)
    return FabricSpec(
        efa_pools=[NodePool(name=k, instance_type=p["instance_type"], fabric="efa",
                            taints=_taints(p.get("taints") or [])) for k, p in efa.items()],
        infiniband_pools=[NodePool(name=p, instance_type="", fabric="infiniband")
                          for p in (ib_args["pools"] if ib_args is not None else [])],
        infiniband=ib, kubernetes_version=args.get("kubernetes_version", DEFAULT_KUBERNETES_VERSION))


# --- EFA ---------------------------------------------------------------------------------------


def efa_instance_types(cfg: FabricView) -> list[str]:
    """The instance types of the configured EFA pools, sorted and unique."""
    return sorted({p.instance_type for p in cfg.efa_pools})


def efa_plugin_values(cfg: FabricView) -> dict[str, Any]:
    return {
        "supportedInstanceLabels": {"keys": [INSTANCE_TYPE_LABEL], "values": efa_instance_types(cfg)},
        # (the chart's DaemonSet hard-codes priorityClassName system-node-critical; it reads no value for it)
        "tolerations": pool_tolerations(cfg.efa_pools),
        "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
    }


# --- InfiniBand --------------------------------------------------------------------------------


def network_operator_values(ib: InfinibandSettings) -> dict[str, Any]:
    """The operator only: the kit creates the NicClusterPolicy itself (the 26.1 chart renders none). Node feature
    discovery comes from the GPU operator (its NFD labels Mellanox NICs pci-15b3 by PCI vendor), so no second NFD
    runs, and neither does the chart's NodeFeatureRule: its CRD (nfd.k8s-sigs.io) comes only with an NFD chart,
    and Helm refuses the whole release when a kind is unknown at install time (network-operator 26.1.1
    templates/nodefeaturerules.yaml, rendered unless nfd.deployNodeFeatureRules is false)."""
    return {
        "nfd": {"enabled": False, "deployNodeFeatureRules": False},
        "sriovNetworkOperator": {"enabled": ib.network == "sriov"},
        "sriov-network-operator": {"operator": {"resourcePrefix": SRIOV_RESOURCE_PREFIX}},
        "operator": {"resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                   "limits": {"cpu": "500m", "memory": "512Mi"}}},
    }


def rdma_network_names(ib: InfinibandSettings) -> list[str]:
    """One network attachment per InfiniBand interface (multi-rail), in config order."""
    return [f"{IP_POOL_NAME}-{iface}" for iface in ib.interfaces]


def rdma_networks_annotation(ib: InfinibandSettings) -> dict[str, str]:
    """The pod annotation that attaches a model pod to every RDMA network (Multus)."""
    refs = ",".join(f"{naming.NETWORK_OPERATOR_NAMESPACE}/{n}" for n in rdma_network_names(ib))
    return {NETWORKS_ANNOTATION: refs}


def sriov_rail_resource(ib: InfinibandSettings, iface: str) -> str:
    """The SR-IOV resource name of one rail (resource names allow letters, digits and '_')."""
    return f"{ib.rdma_resource_name}_{iface.replace('-', '_').replace('.', '_')}"


def rdma_pod_resources(ib: InfinibandSettings) -> dict[str, int]:
    """Extended resources a model pod requests (and limits) to use the RDMA devices: the shared device
    (every rail) with IPoIB, one virtual function of every rail with SR-IOV."""
    if ib.network == "sriov":
        return {f"{SRIOV_RESOURCE_PREFIX}/{sriov_rail_resource(ib, i)}": 1 for i in ib.interfaces}
    return {f"rdma/{ib.rdma_resource_name}": 1}


def _image(name: str) -> dict[str, str]:
    return {"image": name, "repository": versions.NETWORK_OPERATOR_IMAGE_REPOSITORY,
            "version": versions.NETWORK_OPERATOR_IMAGE_TAG}


def nic_cluster_policy(ib: InfinibandSettings) -> dict[str, Any]:
    """The NicClusterPolicy object (mellanox.com/v1alpha1)."""
    spec: dict[str, Any] = {}
    if not ib.hosts_have_ofed:
        spec["ofedDriver"] = {
            "image": "doca-driver",
            "repository": versions.NETWORK_OPERATOR_IMAGE_REPOSITORY,
            "version": versions.DOCA_DRIVER_VERSION,
            "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1,
                              "drain": {"enable": True, "force": True, "deleteEmptyDir": True,
                                        "timeoutSeconds": 300}},
        }
    if ib.network == "ipoib":
        config = {"configList": [{
            "resourceName": ib.rdma_resource_name,
            "rdmaHcaMax": ib.rdma_hca_max,
            "selectors": {"vendors": [MELLANOX_VENDOR_ID], "deviceIDs": list(ib.hca_device_ids),
                          "ifNames": list(ib.interfaces)},
        }]}
        spec["rdmaSharedDevicePlugin"] = {**_image("k8s-rdma-shared-dev-plugin"),
                                          "config": json.dumps(config, sort_keys=True)}
    secondary: dict[str, Any] = {"cniPlugins": _image("plugins"), "multus": _image("multus-cni")}
    if ib.network == "ipoib":
        secondary["ipoib"] = _image("ipoib-cni")
    spec["secondaryNetwork"] = secondary
    spec["nvIpam"] = {**_image("nvidia-k8s-ipam"), "enableWebhook": False}
    # Awaited until the operator reports every state ready: the nv-ipam state is what applies the IPPool CRD
    # (network-operator 26.1.1 manifests/state-nv-ipam-cni/005-nv-ipam.nvidia.com_ippools.yaml; the chart ships
    # none), and the DOCA driver state builds and loads kernel modules node by node (minutes per node).
    # pulumi-kubernetes >= 4.18 awaits `pulumi.com/waitFor` (provider/pkg/metadata/overrides.go ReadyCondition).
    annotations = {WAIT_FOR_ANNOTATION: "jsonpath={.status.state}=ready",
                   TIMEOUT_ANNOTATION: str(NIC_CLUSTER_POLICY_READY_SECONDS)}
    return {"apiVersion": "mellanox.com/v1alpha1", "kind": "NicClusterPolicy",
            "metadata": {"name": NIC_CLUSTER_POLICY_NAME, "labels": dict(naming.MANAGED_BY),
                         "annotations": annotations}, "spec": spec}


def _ib_node_affinity(cfg: FabricView) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": POOL_LABEL, "operator": "In", "values": sorted(p.name for p in cfg.infiniband_pools)}]}]}


def ip_pool(cfg: FabricView) -> dict[str, Any]:
    """The nv-ipam IPPool of the RDMA networks (config validation guarantees the range fits every node)."""
    assert cfg.infiniband is not None
    return {"apiVersion": "nv-ipam.nvidia.com/v1alpha1", "kind": "IPPool",
            "metadata": {"name": IP_POOL_NAME, "namespace": naming.NETWORK_OPERATOR_NAMESPACE,
                         "labels": dict(naming.MANAGED_BY)},
            "spec": {"subnet": cfg.infiniband.ip_range, "perNodeBlockSize": IPAM_BLOCK_SIZE,
                     "nodeSelector": _ib_node_affinity(cfg)}}


def rdma_network_objects(cfg: FabricView) -> list[dict[str, Any]]:
    """IPoIBNetwork per interface, or per interface a SriovNetworkNodePolicy and its SriovIBNetwork."""
    ib = cfg.infiniband
    assert ib is not None
    ipam = json.dumps({"type": "nv-ipam", "poolName": IP_POOL_NAME}, sort_keys=True)
    meta = dict(naming.MANAGED_BY)
    objs: list[dict[str, Any]] = []
    for iface, net in zip(ib.interfaces, rdma_network_names(ib), strict=True):
        if ib.network == "ipoib":
            objs.append({"apiVersion": "mellanox.com/v1alpha1", "kind": "IPoIBNetwork",
                         "metadata": {"name": net, "labels": meta},
                         "spec": {"networkNamespace": naming.NETWORK_OPERATOR_NAMESPACE, "master": iface,
                                  "ipam": ipam}})
            continue
        objs.append({"apiVersion": "sriovnetwork.openshift.io/v1", "kind": "SriovNetworkNodePolicy",
                     "metadata": {"name": net, "namespace": naming.NETWORK_OPERATOR_NAMESPACE, "labels": meta},
                     "spec": {"resourceName": sriov_rail_resource(ib, iface), "linkType": "ib", "isRdma": True,
                              "deviceType": "netdevice", "numVfs": DEFAULT_SRIOV_NUM_VFS,
                              "nicSelector": {"vendor": MELLANOX_VENDOR_ID, "pfNames": [iface]},
                              "nodeSelector": {SRIOV_CAPABLE_LABEL: "true"}}})
        objs.append({"apiVersion": "sriovnetwork.openshift.io/v1", "kind": "SriovIBNetwork",
                     "metadata": {"name": net, "namespace": naming.NETWORK_OPERATOR_NAMESPACE, "labels": meta},
                     "spec": {"resourceName": sriov_rail_resource(ib, iface),
                              "networkNamespace": naming.NETWORK_OPERATOR_NAMESPACE, "ipam": ipam}})
    return objs


class Fabric(pulumi.ComponentResource):
    """EFA device plugin (AWS EFA pools) or the NVIDIA network operator and RDMA networks (InfiniBand)."""
    pulumi_type = TYPE  # the type token (part of every child's URN); the component package hosts a subclass
    # with `aifactory:index:<name>`, the token its schema names (components/__main__.py)

    efa_instance_types: pulumi.Output[list[str]]
    """The instance types the EFA device plugin supports (the EFA pools')."""

    def __init__(self, name: str, args: FabricArgs, opts: pulumi.ResourceOptions | None = None,
                 system_namespace: k8s.core.v1.Namespace | None = None,
                 after: Sequence[pulumi.Resource] = ()) -> None:
        """`system_namespace`: the aifactory-system Namespace resource the EFA plugin waits for (default: none, the
        namespace exists already)."""
        super().__init__(self.pulumi_type, name, None, opts)
        cfg = fabric_spec(name, args)
        if cfg.efa_pools:
            versions.release(f"{name}-efa", versions.EFA_DEVICE_PLUGIN, release_name=EFA_RELEASE_NAME,
                             namespace=naming.SYSTEM_NAMESPACE, values=efa_plugin_values(cfg),
                             opts=pulumi.ResourceOptions(parent=self, depends_on=[
                                 *([system_namespace] if system_namespace is not None else []), *after]))
        if cfg.infiniband_pools and cfg.infiniband is not None:
            self._infiniband(name, cfg)
        self.efa_instance_types = pulumi.Output.from_input(efa_instance_types(cfg))
        self.register_outputs({"efaInstanceTypes": efa_instance_types(cfg)})

    def _infiniband(self, name: str, cfg: FabricView) -> None:
        assert cfg.infiniband is not None
        ns = create_namespace(
            f"{name}-network-operator-ns", naming.NETWORK_OPERATOR_NAMESPACE,
            labels=namespace_labels(pod_security="privileged", kubernetes_version=cfg.kubernetes_version),
            opts=pulumi.ResourceOptions(parent=self))
        operator = versions.release(
            f"{name}-network-operator", versions.NETWORK_OPERATOR, release_name=NETWORK_OPERATOR_RELEASE_NAME,
            namespace=naming.NETWORK_OPERATOR_NAMESPACE, values=network_operator_values(cfg.infiniband),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]))
        def create(obj: dict[str, Any], after: pulumi.Resource) -> k8s.apiextensions.CustomResource:
            return k8s.apiextensions.CustomResource(
                f"{name}-{obj['kind'].lower()}-{obj['metadata']['name']}",
                api_version=obj["apiVersion"], kind=obj["kind"], metadata=obj["metadata"], spec=obj["spec"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[after]))

        policy = create(nic_cluster_policy(cfg.infiniband), operator)
        # the IPPool's CRD exists only once the operator has reconciled the policy's nv-ipam state
        for obj in [ip_pool(cfg), *rdma_network_objects(cfg)]:
            create(obj, policy)
