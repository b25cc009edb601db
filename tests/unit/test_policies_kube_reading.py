"""How the policy pack reads Kubernetes resources (policies/kube.py), case by case with exact results.

Kubernetes facts these encode (API reference, core/v1 PodSpec and apps/v1 / batch/v1 / LeaderWorkerSet templates):
a pod's containers are initContainers, containers and ephemeralContainers; a namespaced object without
metadata.namespace lands in "default"; a toleration with no key and operator Exists tolerates every taint; node
affinity's required terms are ORed, so only a key every term requires is certain. Image references follow the
Docker reference grammar (distribution/reference normalize.go): a first component with '.' or ':' or equal to
"localhost" is a registry host, otherwise docker.io, and single names are library/ images.
"""

from __future__ import annotations

from typing import Any

import pytest

from policies.kube import (
    HELM_RELEASE,
    Image,
    PodSite,
    containers,
    env_value,
    helm_pod_fragments,
    kind_of,
    name_of,
    namespace_of,
    parse_image,
    pod_sites,
    registry_allowed,
    requests_gpu,
    targeted_label_keys,
    tolerated_keys,
)


@pytest.mark.parametrize(("resource_type", "want"), [
    ("kubernetes:security.istio.io/v1:PeerAuthentication", ("security.istio.io", "PeerAuthentication")),
    ("kubernetes:core/v1:Namespace", ("core", "Namespace")),
    ("kubernetes:v1:Pod", ("", "Pod")),
    ("kubernetes:a/b/v1:Thing", ("a/b", "Thing")),
    ("aws:ec2/instance:Instance", ("", "")),
    ("kubernetes:core/v1", ("", "")),
    ("kubernetes:core/v1:Pod:extra", ("", "")),
])
def test_kind_of(resource_type: str, want: tuple[str, str]) -> None:
    assert kind_of(resource_type) == want


def test_namespace_and_name_default() -> None:
    assert namespace_of({"metadata": {"namespace": "team-a", "name": "n"}}) == "team-a"
    assert namespace_of({"metadata": {"name": "n"}}) == "default"
    assert namespace_of({}) == "default"
    assert name_of({"metadata": {"name": "n"}}) == "n"
    assert name_of({"metadata": "not a mapping"}) == ""


POD = {"containers": [{"name": "c"}]}


@pytest.mark.parametrize(("resource_type", "props", "wheres"), [
    ("kubernetes:core/v1:Pod", {"spec": POD}, ["spec"]),
    ("kubernetes:apps/v1:Deployment", {"spec": {"template": {"spec": POD}}}, ["spec.template.spec"]),
    ("kubernetes:batch/v1:CronJob", {"spec": {"jobTemplate": {"spec": {"template": {"spec": POD}}}}},
     ["spec.jobTemplate.spec.template.spec"]),
    ("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet",
     {"spec": {"leaderWorkerTemplate": {"leaderTemplate": {"spec": POD}, "workerTemplate": {"spec": POD}}}},
     ["spec.leaderWorkerTemplate.leaderTemplate.spec", "spec.leaderWorkerTemplate.workerTemplate.spec"]),
    ("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet",
     {"spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": POD}}}},
     ["spec.leaderWorkerTemplate.workerTemplate.spec"]),
    ("kubernetes:apps/v1:Deployment", {"spec": {"template": {"spec": "not a mapping"}}}, []),
    ("kubernetes:core/v1:ConfigMap", {"spec": POD}, []),
])
def test_pod_sites_of_workloads(resource_type: str, props: dict[str, Any], wheres: list[str]) -> None:
    sites = pod_sites(resource_type, {"metadata": {"namespace": "ns"}, **props})
    assert [(s.namespace, s.where, s.complete) for s in sites] == [("ns", w, True) for w in wheres]
    assert all(s.spec == POD for s in sites)


def test_pod_sites_of_a_helm_release_are_incomplete_fragments_in_its_namespace() -> None:
    values = {"image": "nginx:1", "controller": {"image": "ghcr.io/x/c:2"}}
    assert pod_sites(HELM_RELEASE, {"namespace": "gpu-operator", "values": values}) == [
        PodSite("gpu-operator", "values", {"containers": [{"name": "values", "image": "nginx:1"}]}, complete=False),
        PodSite("gpu-operator", "values.controller",
                {"containers": [{"name": "controller", "image": "ghcr.io/x/c:2"}]}, complete=False)]
    [site] = pod_sites(HELM_RELEASE, {"values": {"image": "nginx:1"}})
    assert site.namespace == "default"
    assert pod_sites(HELM_RELEASE, {"namespace": "n"}) == []


def test_helm_fragments_walk_mappings_and_lists_but_take_embedded_pod_specs_whole() -> None:
    values = {
        "podSpec": {"containers": [{"name": "a", "image": "x"}], "hostNetwork": True},
        "workers": [{"image": "w:1"}, "not a mapping", {"nothing": 1}],
        "deep": {"er": {"env": [{"name": "A", "value": "1"}]}},
    }
    assert list(helm_pod_fragments(values)) == [
        ("podSpec", values["podSpec"]),
        ("workers[0]", {"containers": [{"name": "workers[0]", "image": "w:1"}]}),
        ("deep.er", {"containers": [{"name": "deep.er", "env": [{"name": "A", "value": "1"}]}]}),
    ]
    # the containers list of an embedded pod spec is not walked again
    assert list(helm_pod_fragments({"containers": [{"image": "x"}]})) == [("", {"containers": [{"image": "x"}]})]
    assert list(helm_pod_fragments({"a": [{"b": {"image": "i"}}]}, "root")) == [
        ("root.a[0].b", {"containers": [{"name": "root.a[0].b", "image": "i"}]})]
    assert list(helm_pod_fragments(["not", "a", "mapping"])) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("values", [
    {"image": "nginx"}, {"image": {"repository": "r"}}, {"securityContext": {}}, {"containerSecurityContext": {}},
    {"podSecurityContext": {}}, {"hostNetwork": False}, {"hostPID": True}, {"hostIPC": True}, {"tolerations": []},
    {"env": []}, {"resources": {"requests": {}}}, {"resources": {"limits": {}}},
])
def test_a_mapping_with_a_pod_key_of_a_pod_shape_is_a_fragment(values: dict[str, Any]) -> None:
    assert [p for p, _ in helm_pod_fragments({"x": values})] == ["x"]


@pytest.mark.parametrize("values", [
    {"image": 3}, {"securityContext": "strict"}, {"containerSecurityContext": []}, {"podSecurityContext": 1},
    {"hostNetwork": "true"}, {"hostPID": 1}, {"hostIPC": None}, {"tolerations": "all"}, {"env": "prod"},
    {"resources": ["pods", "secrets"]}, {"resources": {"cpu": 1}}, {"name": "x"},
])
def test_rbac_lists_strings_and_other_shapes_are_not_fragments(values: dict[str, Any]) -> None:
    assert list(helm_pod_fragments({"x": values})) == []


def test_a_fragment_is_a_one_container_pod_spec_with_the_values_pod_keys() -> None:
    values = {"image": {"repository": "nvcr.io/nvidia/k8s/dcgm-exporter", "tag": "4.4.2"},
              "containerSecurityContext": {"privileged": True}, "resources": {"limits": {"nvidia.com/gpu": 1}},
              "env": [{"name": "A", "value": "1"}], "hostNetwork": False, "hostPID": True, "hostIPC": False,
              "tolerations": [{"operator": "Exists"}], "nodeSelector": {"k": "v"}, "affinity": {"a": 1},
              "podSecurityContext": {"runAsUser": 0}, "unrelated": 1}
    [(path, spec)] = helm_pod_fragments({"dcgm": values})
    assert (path, spec) == ("dcgm", {
        "containers": [{"name": "dcgm", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.2",
                        "securityContext": {"privileged": True}, "resources": {"limits": {"nvidia.com/gpu": 1}},
                        "env": [{"name": "A", "value": "1"}]}],
        "hostNetwork": False, "hostPID": True, "hostIPC": False, "tolerations": [{"operator": "Exists"}],
        "nodeSelector": {"k": "v"}, "affinity": {"a": 1}, "securityContext": {"runAsUser": 0}})
    # securityContext wins over containerSecurityContext; empty and absent keys are left out; the root is "values"
    [(root, spec)] = helm_pod_fragments({"securityContext": {"a": 1}, "containerSecurityContext": {"b": 2},
                                         "env": [], "resources": {}, "nodeSelector": None,
                                         "podSecurityContext": "no"})
    assert (root, spec) == ("", {"containers": [{"name": "values", "securityContext": {"a": 1}}]})


@pytest.mark.parametrize(("image", "want"), [
    ({"registry": "nvcr.io", "repository": "nvidia/gpu-operator", "tag": "v25.10.1"},
     "nvcr.io/nvidia/gpu-operator:v25.10.1"),
    ({"repository": "nvcr.io/nvidia", "image": "gpu-operator", "version": "v25.10.1"},
     "nvcr.io/nvidia/gpu-operator:v25.10.1"),
    ({"repository": "nvcr.io/nvidia/driver"}, "nvcr.io/nvidia/driver"),
    ({"registry": "", "repository": "r", "tag": "1"}, "r:1"),
    ({"registry": 5, "repository": "r", "tag": "1"}, "r:1"),
    ({"repository": "r", "tag": "1", "digest": "sha256:ab"}, "r@sha256:ab"),
    ({"repository": "r", "tag": "", "version": "2"}, "r:2"),
    ({"repository": "r", "image": 3, "tag": "1"}, "r:1"),
    ({"tag": "1"}, ""),
    ({"repository": 7}, ""),
])
def test_helm_image_shapes(image: dict[str, Any], want: str) -> None:
    spec = dict(helm_pod_fragments({"x": {"image": image}}))["x"]
    assert spec["containers"][0].get("image", "") == want


def test_containers_are_init_regular_and_ephemeral_in_that_order() -> None:
    spec = {"ephemeralContainers": [{"name": "e"}], "containers": [{"name": "c"}, "junk"],
            "initContainers": [{"name": "i"}], "sidecars": [{"name": "s"}]}
    assert [c["name"] for c in containers(spec)] == ["i", "c", "e"]
    assert containers({"containers": "c"}) == []


def test_requests_gpu() -> None:
    assert requests_gpu({"initContainers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]})
    assert requests_gpu({"containers": [{"resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}]})
    assert not requests_gpu({"containers": [{"resources": {"limits": {"nvidia.com/gpu": 0}}}]})
    assert not requests_gpu({"containers": [{"resources": {"limits": {"cpu": 4}}}]})
    # an empty quantity (a Helm values placeholder) asks for nothing
    assert not requests_gpu({"containers": [{"resources": {"limits": {"nvidia.com/gpu": ""}}}]})


def test_tolerated_keys() -> None:
    spec = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}, {"operator": "Exists"},
                            {"operator": "Equal"}, "junk", {"key": "a", "value": "b"}]}
    assert tolerated_keys(spec) == ["nvidia.com/gpu", "*", "a"]
    assert tolerated_keys({}) == []


def test_targeted_label_keys_are_node_selector_keys_and_keys_every_required_term_names() -> None:
    term = {"matchExpressions": [{"key": "pool", "operator": "In"}, {"key": "zone", "operator": "In"},
                                 {"key": "spot", "operator": "NotIn"}, "junk"]}
    other = {"matchExpressions": [{"key": "pool", "operator": "In"}]}
    spec = {"nodeSelector": {"a": "1"}, "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term, other]}}}}
    assert targeted_label_keys(spec) == {"a", "pool"}
    one = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}}
    assert targeted_label_keys(one) == {"pool", "zone"}
    assert targeted_label_keys({"nodeSelector": ["a"]}) == set()
    assert targeted_label_keys({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": ["junk"]}}}}) == set()


def test_env_value_from_a_list_or_a_mapping() -> None:
    container = {"env": [{"name": "A", "value": 1}, {"name": "B"}, "junk", {"name": "C", "value": "c"}]}
    assert env_value(container, "A") == "1"
    assert env_value(container, "B") is None
    assert env_value(container, "C") == "c"
    assert env_value(container, "D") is None
    assert env_value({"env": {"A": 2, "B": None}}, "A") == "2"
    assert env_value({"env": {"A": 2, "B": None}}, "B") is None
    assert env_value({"env": {"A": 2}}, "Z") is None
    assert env_value({}, "A") is None


@pytest.mark.parametrize(("ref", "want"), [
    ("nginx", Image("docker.io", "library/nginx", "", "")),
    ("nginx:1.27", Image("docker.io", "library/nginx", "1.27", "")),
    ("bitnami/redis:7", Image("docker.io", "bitnami/redis", "7", "")),
    ("nvcr.io/nvidia/k8s/dcgm-exporter:4.4.2", Image("nvcr.io", "nvidia/k8s/dcgm-exporter", "4.4.2", "")),
    ("localhost/app:1", Image("localhost", "app", "1", "")),
    ("registry:5000/team/app", Image("registry:5000", "team/app", "", "")),
    ("registry:5000/team/app:v2@sha256:ab", Image("registry:5000", "team/app", "v2", "sha256:ab")),
    ("ghcr.io/a/b/c:1.0", Image("ghcr.io", "a/b/c", "1.0", "")),
])
def test_parse_image(ref: str, want: Image) -> None:
    assert parse_image(ref) == want


def test_registry_allowed_matches_the_source_or_anything_under_it() -> None:
    img = parse_image("nvcr.io/nvidia/gpu-operator:v1")
    assert img.source == "nvcr.io/nvidia/gpu-operator"
    assert registry_allowed(img, ["nvcr.io/nvidia"])
    assert registry_allowed(img, ["nvcr.io/*"])
    assert registry_allowed(img, ["quay.io", "nvcr.io/nvidia/gpu-operator"])
    assert not registry_allowed(img, ["nvcr.io/nvidiax"])
    assert not registry_allowed(img, [])
