"""GPU stack, fabric, autoscaler and chart pins: the values and objects the platform layer builds."""

from __future__ import annotations

import copy
import json

import pulumi

from components.k8s import autoscaler, fabric, gpu_stack, naming, versions
from components.k8s.platform import Platform
from infra.component_args import platform_args
from infra.config import PlatformConfig
from infra.synth import SynthResult, read_stack_config, run_program, stack_file
from infra.writers.kubernetes import HELM_RELEASE, helm_releases, kubernetes_objects
from telemetry.names import DCGM
from tests.support.stacks import stack_config, stack_raw

stack_cfg = stack_config


def platform_only(stack: str) -> SynthResult:
    """The platform layer alone, on the stack's existing-cluster style provider (fast, isolated)."""
    def program(cfg: PlatformConfig) -> None:
        import pulumi_kubernetes as k8s

        provider = k8s.Provider("cluster", kubeconfig="{}")
        Platform("platform", platform_args(cfg), opts=pulumi.ResourceOptions(provider=provider))

    return run_program(stack, read_stack_config(stack_file(stack)), program=program)


# --- chart pins ----------------------------------------------------------------------------


def test_every_chart_is_pinned_to_an_official_repository() -> None:
    got = {(c.chart, c.repository, c.version) for c in versions.ALL_CHARTS}
    assert got == {
        ("gpu-operator", "https://helm.ngc.nvidia.com/nvidia", "v25.10.1"),
        ("network-operator", "https://helm.ngc.nvidia.com/nvidia", "26.1.1"),
        ("aws-efa-k8s-device-plugin", "https://aws.github.io/eks-charts", "v0.5.26"),
        ("cluster-autoscaler", "https://kubernetes.github.io/autoscaler", "9.52.1"),
        ("aws-load-balancer-controller", "https://aws.github.io/eks-charts", "3.5.0"),
        ("base", "https://istio-release.storage.googleapis.com/charts", "1.28.3"),
        ("istiod", "https://istio-release.storage.googleapis.com/charts", "1.28.3"),
        ("cni", "https://istio-release.storage.googleapis.com/charts", "1.28.3"),
        ("kube-prometheus-stack", "https://prometheus-community.github.io/helm-charts", "82.4.0"),
        ("opentelemetry-collector", "https://open-telemetry.github.io/opentelemetry-helm-charts", "0.143.0"),
        ("jaeger", "https://jaegertracing.github.io/helm-charts", "4.11.1"),
        ("loki", "https://grafana.github.io/helm-charts", "6.53.0"),
        ("alloy", "https://grafana.github.io/helm-charts", "1.4.0"),
        ("lws", "oci://registry.k8s.io/lws/charts", "0.9.0"),
        ("keda", "https://kedacore.github.io/charts", "2.18.1"),
        ("valkey", "https://valkey.io/valkey-helm/", "0.11.0"),
        ("metrics-server", "https://kubernetes-sigs.github.io/metrics-server", "3.13.1"),
    }


def test_platform_releases_carry_chart_repository_and_version() -> None:
    releases = {(r["namespace"], r["name"]): (r["chart"], r["repository"], r["version"])
                for r in helm_releases(platform_only("staging").resources)}
    istio = ("https://istio-release.storage.googleapis.com/charts", "1.28.3")
    assert releases == {
        ("gpu-operator", "gpu-operator"): ("gpu-operator", "https://helm.ngc.nvidia.com/nvidia", "v25.10.1"),
        ("aifactory-system", "aws-efa-k8s-device-plugin"):
            ("aws-efa-k8s-device-plugin", "https://aws.github.io/eks-charts", "v0.5.26"),
        ("istio-system", "istio-base"): ("base", *istio),
        ("istio-system", "istio-cni"): ("cni", *istio),
        ("istio-system", "istiod"): ("istiod", *istio),
        ("monitoring", "kube-prometheus-stack"):
            ("kube-prometheus-stack", "https://prometheus-community.github.io/helm-charts", "82.4.0"),
        ("monitoring", "otel-collector"):
            ("opentelemetry-collector", "https://open-telemetry.github.io/opentelemetry-helm-charts", "0.143.0"),
        ("monitoring", "jaeger"): ("jaeger", "https://jaegertracing.github.io/helm-charts", "4.11.1"),
        ("monitoring", "loki"): ("loki", "https://grafana.github.io/helm-charts", "6.53.0"),
        ("monitoring", "alloy"): ("alloy", "https://grafana.github.io/helm-charts", "1.4.0"),
        ("aifactory-system", "metrics-server"):
            ("metrics-server", "https://kubernetes-sigs.github.io/metrics-server", "3.13.1"),
    }


def test_oci_charts_are_referenced_by_url_without_repository() -> None:
    def program(cfg: PlatformConfig) -> None:
        versions.release("lws", versions.LWS, release_name="lws", namespace="lws-system", values={},
                         opts=pulumi.ResourceOptions())

    [lws] = helm_releases(run_program("dev", read_stack_config(stack_file("dev")), program=program).resources)
    assert (lws["chart"], lws["repository"], lws["version"]) == ("oci://registry.k8s.io/lws/charts/lws", None,
                                                                 "0.9.0")


# --- GPU stack -----------------------------------------------------------------------------


def test_gpu_operator_on_eks_leaves_driver_and_toolkit_to_the_ami() -> None:
    values = gpu_stack.gpu_operator_values(stack_cfg("prod"))
    assert values["driver"] == {"enabled": False, "rdma": {"enabled": False, "useHostMofed": False}}
    assert values["toolkit"] == {"enabled": False}
    assert values["mig"] == {"strategy": "single"}
    assert values["migManager"] == {"enabled": False}
    assert values["daemonsets"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                    "effect": "NoSchedule"}]


def test_gpu_operator_onprem_installs_driver_with_rdma_and_mixed_mig() -> None:
    values = gpu_stack.gpu_operator_values(stack_cfg("onprem"))
    assert values["driver"] == {"enabled": True, "rdma": {"enabled": True, "useHostMofed": False}}
    assert values["toolkit"] == {"enabled": True}
    assert values["mig"] == {"strategy": "mixed"}
    assert values["migManager"] == {"enabled": True}


def test_gpu_operator_onprem_with_host_drivers_and_ofed() -> None:
    raw = stack_raw("onprem")
    cfg = stack_cfg("onprem", target={**raw["target"], "hostsHaveDrivers": True},
                    infiniband={**raw["infiniband"], "hostsHaveOfed": True})
    values = gpu_stack.gpu_operator_values(cfg)
    assert values["driver"] == {"enabled": False, "rdma": {"enabled": True, "useHostMofed": True}}
    assert values["toolkit"] == {"enabled": False}


def test_gpu_operator_tolerates_every_gpu_pool_taint_once() -> None:
    raw = stack_raw("prod")
    pools = copy.deepcopy(raw["nodePools"])
    pools["l40s"]["taints"] = [{"key": "dedicated", "value": "small", "effect": "NoExecute"},
                               {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    values = gpu_stack.gpu_operator_values(stack_cfg("prod", nodePools=pools))
    assert values["daemonsets"]["tolerations"] == [
        {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]


def test_dcgm_exporter_kubernetes_mode_service_monitor_and_custom_counters() -> None:
    dcgm = gpu_stack.gpu_operator_values(stack_cfg("dev"))["dcgmExporter"]
    assert dcgm["serviceMonitor"] == {"enabled": True, "interval": "15s", "honorLabels": True}
    assert dcgm["env"] == [{"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                           {"name": "DCGM_EXPORTER_COLLECTORS", "value": "/etc/dcgm-exporter/dcgm-metrics.csv"}]
    assert dcgm["config"]["name"] == "aifactory-dcgm-counters" and dcgm["config"]["create"] is True
    lines = [line for line in dcgm["config"]["data"].splitlines() if not line.startswith("#")]
    rows = [[f.strip() for f in line.split(",")] for line in lines]
    fields = {row[0]: row[1] for row in rows}
    every_dcgm_name = {v for k, v in vars(DCGM).items() if isinstance(v, str) and v.startswith("DCGM_FI_")}
    assert set(fields) == every_dcgm_name
    assert {f: fields[f] for f in (DCGM.SM_ACTIVE, DCGM.XID, DCGM.ECC_DBE_VOLATILE, DCGM.ROW_REMAP_FAILURE,
                                   DCGM.ENERGY)} == {
        DCGM.SM_ACTIVE: "gauge", DCGM.XID: "gauge", DCGM.ECC_DBE_VOLATILE: "counter",
        DCGM.ROW_REMAP_FAILURE: "gauge", DCGM.ENERGY: "counter"}
    assert all(len(row) == 3 for row in rows)


def test_mig_labels_and_resources() -> None:
    cfg = stack_cfg("onprem")
    assert gpu_stack.mig_node_labels(cfg.node_pools["a100-mig"]) == {"nvidia.com/mig.config": "all-1g.10gb"}
    assert gpu_stack.mig_node_labels(cfg.node_pools["h100-ib"]) == {}
    assert gpu_stack.mig_resource("1g.10gb") == "nvidia.com/mig-1g.10gb"


# --- EFA -----------------------------------------------------------------------------------


def test_efa_plugin_lists_exactly_the_efa_pools_instance_types() -> None:
    values = fabric.efa_plugin_values(stack_cfg("prod"))
    assert set(values) == {"supportedInstanceLabels", "tolerations", "resources"}  # only keys the chart reads
    assert values["supportedInstanceLabels"] == {"keys": ["node.kubernetes.io/instance-type"],
                                                 "values": ["p5.48xlarge", "p5en.48xlarge"]}
    assert values["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert values["resources"] == {"requests": {"cpu": "10m", "memory": "20Mi"},
                                   "limits": {"cpu": "100m", "memory": "64Mi"}}
    assert fabric.efa_instance_types(stack_cfg("staging")) == ["p5.48xlarge"]


def test_efa_plugin_only_where_efa_pools_exist() -> None:
    names = {r["name"] for r in helm_releases(platform_only("dev").resources)}
    assert fabric.EFA_RELEASE_NAME not in names
    assert fabric.EFA_RELEASE_NAME in {r["name"] for r in helm_releases(platform_only("prod").resources)}


# --- InfiniBand ----------------------------------------------------------------------------

# A DGX H100's 8 compute rails, netdev and RDMA device per OSFP port (NVIDIA DGX H100/H200 user guide, "Network
# ports"; the NCCL_IB_HCA list of NVIDIA's DGX H100 recipes); mlx5_1/2/7/8 are the storage cards.
DGX_H100_NETDEVS = ["ibp24s0", "ibp64s0", "ibp79s0", "ibp94s0", "ibp154s0", "ibp192s0", "ibp206s0", "ibp220s0"]
DGX_H100_HCAS = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]


def test_nic_cluster_policy_ipoib() -> None:
    policy = fabric.nic_cluster_policy(stack_cfg("onprem").infiniband)
    image = {"repository": "nvcr.io/nvidia/mellanox", "version": "network-operator-v26.1.1"}
    assert policy["metadata"]["name"] == "nic-cluster-policy"
    # awaited until the operator says every state is ready (CRD status.state enum: ignore, notReady, ready, error)
    assert policy["metadata"]["annotations"] == {"pulumi.com/waitFor": "jsonpath={.status.state}=ready",
                                                 "pulumi.com/timeoutSeconds": "3600"}
    assert policy["spec"] == {
        # the DOCA driver network-operator 26.1.1 ships (its hack/release.yaml, Mofed.version)
        "ofedDriver": {"image": "doca-driver", "repository": "nvcr.io/nvidia/mellanox",
                       "version": "doca3.3.0-26.01-1.0.0.0-4",
                       "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1,
                                         "drain": {"enable": True, "force": True, "deleteEmptyDir": True,
                                                   "timeoutSeconds": 300}}},
        "rdmaSharedDevicePlugin": {"image": "k8s-rdma-shared-dev-plugin", **image, "config": json.dumps(
            {"configList": [{"rdmaHcaMax": 63, "resourceName": "rdma_shared_device_a",
                             "selectors": {"deviceIDs": ["101b", "1021"], "ifNames": DGX_H100_NETDEVS,
                                           "vendors": ["15b3"]}}]}, sort_keys=True)},
        "secondaryNetwork": {"cniPlugins": {"image": "plugins", **image}, "multus": {"image": "multus-cni", **image},
                             "ipoib": {"image": "ipoib-cni", **image}},
        "nvIpam": {"image": "nvidia-k8s-ipam", **image, "enableWebhook": False},
    }


def test_the_network_operator_release_renders_no_kind_a_fresh_cluster_lacks() -> None:
    """network-operator 26.1.1 renders a NodeFeatureRule (nfd.k8s-sigs.io, templates/nodefeaturerules.yaml) unless
    nfd.deployNodeFeatureRules is false; with its NFD subchart off, that CRD exists only if the GPU operator's
    NFD got there first, and Helm fails the whole install on an unknown kind. `deployCR` is not a value of the
    26.1 chart (it renders no NicClusterPolicy)."""
    values = fabric.network_operator_values(stack_cfg("onprem").infiniband)
    assert values["nfd"] == {"enabled": False, "deployNodeFeatureRules": False}
    assert "deployCR" not in values


def test_the_ip_pool_waits_for_the_policy_whose_nv_ipam_state_installs_its_crd() -> None:
    from infra.synth import read_stack_config, run_program, stack_file

    res = {r.name: r for r in run_program("onprem", read_stack_config(stack_file("onprem"))).resources}
    policy = res["platform-fabric-nicclusterpolicy-nic-cluster-policy"]
    assert policy.urn in res["platform-fabric-ippool-aifactory-rdma"].dependencies
    assert policy.urn in res["platform-fabric-ipoibnetwork-aifactory-rdma-ibp24s0"].dependencies
    assert res["platform-fabric-network-operator"].urn in policy.dependencies


def test_ipoib_network_ip_pool_and_what_model_pods_use() -> None:
    cfg = stack_cfg("onprem")
    # one network attachment per compute rail of the DGX H100s (not 1 of 8: issue #16 item 4)
    assert fabric.rdma_network_objects(cfg) == [{
        "apiVersion": "mellanox.com/v1alpha1", "kind": "IPoIBNetwork",
        "metadata": {"name": f"aifactory-rdma-{rail}", "labels": {"app.kubernetes.io/managed-by": "aifactory"}},
        "spec": {"networkNamespace": "nvidia-network-operator", "master": rail,
                 "ipam": '{"poolName": "aifactory-rdma", "type": "nv-ipam"}'}} for rail in DGX_H100_NETDEVS]
    assert fabric.ip_pool(cfg)["spec"] == {
        "subnet": "192.168.100.0/22", "perNodeBlockSize": 16,
        "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "aifactory.io/pool", "operator": "In", "values": ["h100-ib"]}]}]}}
    assert fabric.rdma_networks_annotation(cfg.infiniband) == {
        "k8s.v1.cni.cncf.io/networks": ",".join(f"nvidia-network-operator/aifactory-rdma-{r}"
                                                for r in DGX_H100_NETDEVS)}
    assert cfg.infiniband.hcas == tuple(DGX_H100_HCAS)
    assert fabric.rdma_pod_resources(cfg.infiniband) == {"rdma/rdma_shared_device_a": 1}


RAILS = [f"ib{i}" for i in range(8)]


def test_sriov_infiniband_uses_virtual_functions_and_no_shared_device_plugin() -> None:
    raw = stack_raw("onprem")
    cfg = stack_cfg("onprem", infiniband={**raw["infiniband"], "network": "sriov", "interfaces": RAILS,
                                          "hostsHaveOfed": True})
    policy = fabric.nic_cluster_policy(cfg.infiniband)
    assert set(policy["spec"]) == {"secondaryNetwork", "nvIpam"}
    assert set(policy["spec"]["secondaryNetwork"]) == {"cniPlugins", "multus"}
    objs = fabric.rdma_network_objects(cfg)
    assert [(o["kind"], o["metadata"]["name"]) for o in objs] == [
        (kind, f"aifactory-rdma-{rail}") for rail in RAILS for kind in ("SriovNetworkNodePolicy", "SriovIBNetwork")]
    # one RDMA resource per rail: a pod gets one VF of every rail, not two VFs of one PF
    assert objs[0]["spec"] == {"resourceName": "rdma_shared_device_a_ib0", "linkType": "ib", "isRdma": True,
                               "deviceType": "netdevice", "numVfs": 8,
                               "nicSelector": {"vendor": "15b3", "pfNames": ["ib0"]},
                               "nodeSelector": {"feature.node.kubernetes.io/network-sriov.capable": "true"}}
    assert objs[1]["spec"]["resourceName"] == "rdma_shared_device_a_ib0"
    assert objs[3]["spec"]["resourceName"] == "rdma_shared_device_a_ib1"
    assert fabric.rdma_pod_resources(cfg.infiniband) == {f"nvidia.com/rdma_shared_device_a_{r}": 1 for r in RAILS}
    assert fabric.network_operator_values(cfg.infiniband)["sriovNetworkOperator"] == {"enabled": True}


def test_onprem_renders_infiniband_and_aws_renders_none() -> None:
    onprem = platform_only("onprem")
    kinds = {(o["apiVersion"], o["kind"]) for o in kubernetes_objects(onprem.resources)}
    assert {("mellanox.com/v1alpha1", "NicClusterPolicy"), ("mellanox.com/v1alpha1", "IPoIBNetwork"),
            ("nv-ipam.nvidia.com/v1alpha1", "IPPool")} <= kinds
    assert "network-operator" in {r["name"] for r in helm_releases(onprem.resources)}
    assert not [r.type for r in onprem.resources if r.type.startswith(("aws:", "pulumi:providers:aws"))]
    for stack in ("dev", "staging", "prod"):
        result = platform_only(stack)
        assert not [o for o in kubernetes_objects(result.resources)
                    if o["apiVersion"].split("/")[0] in ("mellanox.com", "nv-ipam.nvidia.com",
                                                          "sriovnetwork.openshift.io")]
        assert "network-operator" not in {r["name"] for r in helm_releases(result.resources)}


def test_every_platform_resource_uses_the_given_provider() -> None:
    result = platform_only("prod")
    custom = [r for r in result.resources if r.custom and r.type.startswith("kubernetes:")]
    assert custom and {r.provider.split("::")[-2] for r in custom} == {"cluster"}
    assert any(r.type == HELM_RELEASE for r in custom)


# --- autoscaler ----------------------------------------------------------------------------


def test_autoscaler_values_and_scoped_policy() -> None:
    values = autoscaler.autoscaler_values(cluster_name="aifactory-prod", region="us-east-1",
                                          role_arn="arn:aws:iam::123456789012:role/ca")
    # not the chart's default k8s.io/cluster-autoscaler/enabled: EKS puts it on every managed group's ASG
    assert values["autoDiscovery"] == {"clusterName": "aifactory-prod", "tags": [
        "aifactory.io/autoscaled", "k8s.io/cluster-autoscaler/aifactory-prod"]}
    assert values["awsRegion"] == "us-east-1" and values["cloudProvider"] == "aws"
    assert values["rbac"] == {"serviceAccount": {"create": True, "name": "cluster-autoscaler", "annotations": {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/ca"}}}
    assert values["containerSecurityContext"]["capabilities"] == {"drop": ["ALL"]}
    write = autoscaler.autoscaler_policy("aifactory-prod")["Statement"][1]
    assert write == {"Sid": "ScaleOwnGroups", "Effect": "Allow",
                     "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
                     "Resource": "*", "Condition": {"StringEquals": {
                         "aws:ResourceTag/k8s.io/cluster-autoscaler/aifactory-prod": "owned",
                         "aws:ResourceTag/aifactory.io/autoscaled": "true"}}}


def test_autoscaler_in_the_aws_program_with_an_irsa_role() -> None:
    from infra.program import program

    result = run_program("prod", read_stack_config(stack_file("prod")), program=program)
    [release] = [r for r in helm_releases(result.resources) if r["name"] == "cluster-autoscaler"]
    assert release["namespace"] == naming.SYSTEM_NAMESPACE
    role_arn = release["values"]["rbac"]["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"]
    [role] = [r for r in result.resources if r.type == "aws:iam/role:Role" and r.name == "cluster-autoscaler-irsa"]
    assert role_arn == role.outputs["arn"]
    [oidc] = [r for r in result.resources if r.type == "aws:iam/openIdConnectProvider:OpenIdConnectProvider"]
    issuer = oidc.outputs["url"].removeprefix("https://")
    [statement] = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert statement == {
        "Effect": "Allow", "Principal": {"Federated": oidc.outputs["arn"]}, "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {f"{issuer}:sub": "system:serviceaccount:aifactory-system:cluster-autoscaler",
                                       f"{issuer}:aud": "sts.amazonaws.com"}}}


def test_prometheus_release_waits_for_istiod_and_no_urn_changes() -> None:
    """Prometheus gets its sidecar (and the mesh certificate the sidecar writes to /etc/prom-certs for https
    scrapes) from istiod's injection webhook at pod creation; Istio injects only pods created while the webhook
    is up (istio.io docs, "Installing the Sidecar": injection happens at pod creation). The release records
    istiod as a dependency, and reordering the composition keeps every URN (same names, same parents)."""
    for stack in ("prod", "onprem"):
        result = platform_only(stack)
        by_name = {r.name: r for r in result.resources}
        kps, istiod = by_name["platform-observability-kube-prometheus-stack"], by_name["platform-mesh-istiod"]
        assert istiod.urn in kps.dependencies, stack
        assert kps.urn == ("urn:pulumi:" + stack + "::aifactory::aifactory:k8s:Platform$aifactory:k8s:Observability"
                           "$kubernetes:helm.sh/v3:Release::platform-observability-kube-prometheus-stack")
        assert istiod.urn == ("urn:pulumi:" + stack + "::aifactory::aifactory:k8s:Platform$aifactory:k8s:Mesh"
                              "$kubernetes:helm.sh/v3:Release::platform-mesh-istiod")
