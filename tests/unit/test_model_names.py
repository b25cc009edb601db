"""Names the cluster derives from a model's name, checked against the rule of each kind (components/k8s/naming.py
cites the upstream validators): a Service refuses a name starting with a digit; a LeaderWorkerSet's worker
StatefulSets over 52 characters never get a pod."""

from __future__ import annotations

from components.k8s.naming import STATEFULSET_NAME_MAX, model_name_problems


def test_a_service_name_must_start_with_a_letter() -> None:
    assert model_name_problems("7b-chat", multi_node=False, max_replicas=1) == [
        "'7b-chat' (7 characters) names the model's Service, which must be a DNS-1035 label: at most 63 characters "
        "of lowercase letters, digits and '-', starting with a letter and ending with a letter or digit"]
    assert model_name_problems("chat-7b", multi_node=False, max_replicas=1) == []


def test_the_length_is_in_the_message() -> None:
    assert model_name_problems("a" * 64, multi_node=False, max_replicas=1)[0].startswith(
        f"'{'a' * 64}' (64 characters) names the model's Service")
    assert model_name_problems("a" * 63, multi_node=False, max_replicas=1) == []


def test_a_multi_node_models_worker_statefulsets_fit_the_revision_label() -> None:
    assert STATEFULSET_NAME_MAX == 52  # 63-character label value - '-' - up to 10 hash characters
    # 55 characters: '<name>-lws-1' is 61 characters, the revision label 72: no pod is ever created.
    name = "llama-3-1-405b-instruct-fp8-multinode-tensor-parallel16"
    assert len(name) == 55
    assert model_name_problems(name, multi_node=True, max_replicas=2) == [
        f"'{name}' (55 characters) is too long for a multi-node model with up to 2 replicas: its LeaderWorkerSet "
        f"names the last group's worker StatefulSet '{name}-lws-1' (61 characters), and a StatefulSet over 52 "
        "characters never gets a pod (its pods' controller-revision-hash label would exceed 63); use at most 46 "
        "characters"]
    assert model_name_problems(name[:46], multi_node=True, max_replicas=2) == []
    # ten groups: the last worker set is '<name>-lws-9', 10 or more: two digits.
    assert model_name_problems("m" * 46, multi_node=True, max_replicas=10) == []
    assert model_name_problems("m" * 46, multi_node=True, max_replicas=11)[0].endswith("use at most 45 characters")
    # a single-node model of the same name is fine: a Deployment's pods get generated, truncated names.
    assert model_name_problems(name, multi_node=False, max_replicas=2) == []
