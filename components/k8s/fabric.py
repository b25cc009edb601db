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
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, versions
from components.k8s.defaults import IPAM_BLOCK_SIZE
from components.k8s.gpu_stack import pool_tolerations
from components.k8s.namespaces import create_namespace, namespace_labels
from components.vocabulary import POOL_LABEL
from infra.config import InfinibandSettings, PlatformConfig

__all__ = [
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


# --- EFA ---------------------------------------------------------------------------------------


def efa_instance_types(cfg: PlatformConfig) -> list[str]:
    """The instance types of the configured EFA pools, sorted and unique."""
    return sorted({p.instance_type for p in cfg.efa_pools})


def efa_plugin_values(cfg: PlatformConfig) -> dict[str, Any]:
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


def _ib_node_affinity(cfg: PlatformConfig) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": POOL_LABEL, "operator": "In", "values": sorted(p.name for p in cfg.infiniband_pools)}]}]}


def ip_pool(cfg: PlatformConfig) -> dict[str, Any]:
    """The nv-ipam IPPool of the RDMA networks (config validation guarantees the range fits every node)."""
    assert cfg.infiniband is not None
    return {"apiVersion": "nv-ipam.nvidia.com/v1alpha1", "kind": "IPPool",
            "metadata": {"name": IP_POOL_NAME, "namespace": naming.NETWORK_OPERATOR_NAMESPACE,
                         "labels": dict(naming.MANAGED_BY)},
            "spec": {"subnet": cfg.infiniband.ip_range, "perNodeBlockSize": IPAM_BLOCK_SIZE,
                     "nodeSelector": _ib_node_affinity(cfg)}}


def rdma_network_objects(cfg: PlatformConfig) -> list[dict[str, Any]]:
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

    def __init__(self, name: str, *, cfg: PlatformConfig, system_namespace: k8s.core.v1.Namespace,
                 after: Sequence[pulumi.Resource] = (), opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:Fabric", name, None, opts)
        if cfg.efa_pools:
            versions.release(f"{name}-efa", versions.EFA_DEVICE_PLUGIN, release_name=EFA_RELEASE_NAME,
                             namespace=naming.SYSTEM_NAMESPACE, values=efa_plugin_values(cfg),
                             opts=pulumi.ResourceOptions(parent=self, depends_on=[system_namespace, *after]))
        if cfg.infiniband_pools and cfg.infiniband is not None:
            self._infiniband(name, cfg)
        self.register_outputs({"efaInstanceTypes": efa_instance_types(cfg)})

    def _infiniband(self, name: str, cfg: PlatformConfig) -> None:
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
