"""ModelDeployment on its own args (no stack config): the pool's objects with exact image and GPU limits,
children named from its name, every invalid argument at once with its path, and the stacks' mapping losing
nothing the build functions read."""

import pulumi
import pytest

from components.k8s import serving
from components.k8s.serving import ModelDeployment, ModelDeploymentArgs, serving_spec
from infra.component_args import model_deployment_args
from tests.support.stacks import stack_config
from tests.unit.test_aws_node_pool import register


def args(**extra) -> ModelDeploymentArgs:
    a: ModelDeploymentArgs = {"engine": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct", "tenant": "chat",
                              "model_name": "llama-8b", "pool": {"name": "l40s", "instance_type": "g6e.12xlarge"},
                              "tensor_parallel": 2, "storage_class": "fast-nvme"}
    a.update(extra)  # type: ignore[typeddict-item]
    return a


def test_model_deployment_from_its_own_args_on_an_existing_cluster() -> None:
    res = register(lambda: ModelDeployment("llama", args()))
    names = sorted(r.name for r in res if r.name.startswith("llama-"))
    assert names == ["llama-poddisruptionbudget", "llama-service", "llama-serviceaccount",
                     "llama-servicemonitor", "llama-statefulset"]
    dep = next(r for r in res if r.name == "llama-statefulset").inputs
    assert dep["metadata"]["namespace"] == "chat"  # default: the tenant's name
    pod = dep["spec"]["template"]["spec"]
    engine = pod["containers"][0]
    assert engine["image"] == "vllm/vllm-openai:v0.33.0"
    # g6e.12xlarge: 4 L40S, 48 vCPUs, 384 GiB; two GPUs are half the node, 80% of that half for the pod
    assert engine["resources"]["limits"] == {"cpu": "19", "memory": "153Gi", "nvidia.com/gpu": "2"}
    assert engine["resources"]["requests"] == engine["resources"]["limits"]
    assert pod["nodeSelector"] == {"aifactory.io/pool": "l40s"}
    # the default taint nvidia.com/gpu=true:NoSchedule, tolerated exactly
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true",
                                   "effect": "NoSchedule"}]
    command = engine["command"]
    assert command[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert command[command.index("--tensor-parallel-size") + 1] == "2"
    assert command[command.index("--served-model-name") + 1] == "llama-8b"
    claim = next(v for v in pod["volumes"] if v["name"] == "model-cache")["ephemeral"]["volumeClaimTemplate"]
    assert claim["spec"]["storageClassName"] == "fast-nvme"
    assert next(r for r in res if r.name == "llama-service").inputs["metadata"]["name"] == "llama-8b"


def test_every_invalid_argument_is_reported_at_once_with_its_path() -> None:
    bad = args(engine="tgi", quantization="int4", tensor_parallel=0, uri="http://weights", replicas={"min": 3,
                                                                                                      "max": 2})
    bad["pool"] = {"name": "l40s", "instance_type": "g9.huge", "fabric": "ethernet"}
    del bad["storage_class"]
    with pytest.raises(pulumi.InputPropertiesError) as err:
        serving_spec("llama", bad)
    assert [e["property_path"] for e in err.value.errors] == [
        "engine", "pool.instanceType", "pool.fabric", "quantization", "tensorParallel", "replicas.min", "uri",
        "storageClass"]
    reasons = {e["property_path"]: e["reason"] for e in err.value.errors}
    assert reasons["engine"] == "'tgi' is not allowed; choose one of: vllm, triton, sglang"
    assert reasons["replicas.min"] == "3 must be between 0 and replicas.max (2)"
    assert reasons["storageClass"] == "is required off AWS (no awsRegion): the class the model cache volumes use"


def test_a_misspelt_argument_is_named_before_anything_reads_it() -> None:
    with pytest.raises(pulumi.InputPropertiesError) as err:
        serving_spec("llama", args(tensor_paralel=2))
    assert [e["property_path"] for e in err.value.errors] == ["tensorParalel"]
    assert "did you mean 'tensor_parallel'?" in err.value.errors[0]["reason"]


@pytest.mark.parametrize("name", ["dev", "staging", "prod", "onprem"])
def test_the_stacks_args_build_the_same_objects_as_their_config(name: str) -> None:
    """infra maps each model of each shipped stack to ModelDeploymentArgs without losing a setting the build
    functions read: the objects built from the args are the objects built from the stack config."""
    cfg = stack_config(name)
    for m in cfg.models.values():
        spec = serving_spec(f"model-{m.name}", model_deployment_args(cfg, m))
        assert serving.model_objects(spec, spec.model, role_arn="arn") == serving.model_objects(cfg, m,
                                                                                                role_arn="arn")


# A value other than the default for each setting the args share with the Model; a shared key missing here fails
# the test below, so a new setting is checked the day it is added.
NON_DEFAULT = {
    "uri": "pvc://weights/llama-8b", "tensor_parallel": 4, "pipeline_parallel": 2, "gpus_per_replica": 2,
    "quantization": "fp8", "max_model_length": 8192, "prefix_caching": False, "workload": "chat", "cache_gib": 123,
    "startup_budget_seconds": 1234, "quantized_checkpoint": False, "expert_parallel": True, "kv_offload_gib": 16.0,
    "weights_gib": 15.5, "task": "embed", "tool_call_parser": "llama3_json", "tokenizer": "meta-llama/Llama-3.1-8B",
    "group_formation_seconds": 321, "mig_profile": "1g.12gb", "timeout_seconds": 900.0,
}
# Sections and required keys, checked by the tests above; what the gateway and the dashboards read of a model, which
# ModelDeployment does not take.
# What a value needs beside it to be valid (and to differ from the default it would otherwise get)
WITH = {"mig_profile": {"tensor_parallel": 1}, "gpus_per_replica": {"mig_profile": "1g.12gb", "tensor_parallel": 1}}
NOT_SCALAR = {"engine", "model", "tenant", "pool", "speculative", "replicas"}
NOT_DEPLOYMENT = {"name", "priority", "slo", "callers", "max_request_bytes",
                  "try_idle_timeout_seconds", "variant", "session_affinity_balance_factor", "gpus_per_node_hint",
                  "spans_nodes"}


def test_every_model_setting_the_args_take_reaches_the_model_the_objects_are_built_from() -> None:
    """A key ModelDeploymentArgs takes but the mapping to the Model does not pass on is dropped without a word (the
    tool-call parser once was): each one, set alone to a value other than its default, is in serving_spec's model;
    and each Model field is either an arg or something ModelDeployment does not build from."""
    import dataclasses
    import typing

    from components.k8s.settings import Model

    fields = {f.name for f in dataclasses.fields(Model)}
    keys = set(typing.get_type_hints(ModelDeploymentArgs))
    assert fields - keys == NOT_DEPLOYMENT
    assert sorted(NON_DEFAULT) == sorted(fields & keys - NOT_SCALAR)
    for key, value in NON_DEFAULT.items():
        without = serving_spec("llama", args(**WITH.get(key, {}))).model
        model = serving_spec("llama", args(**{key: value}, **WITH.get(key, {}))).model
        assert (getattr(model, key), getattr(without, key) != value) == (value, True), key


def test_a_component_user_gets_the_checks_a_stack_gets_for_the_replica_shape_and_the_engine() -> None:
    """gpusPerReplica against tensorParallel x pipelineParallel, and the engine's own model checks
    (Engine.model_problems): the same messages the stack model gives under models.X."""
    with pytest.raises(pulumi.InputPropertiesError) as err:
        serving_spec("llama", args(gpus_per_replica=1))
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [
        ("gpusPerReplica", "1 must equal tensorParallel x pipelineParallel (2)")]
    with pytest.raises(pulumi.InputPropertiesError) as err:
        serving_spec("llama", args(engine="triton", tool_call_parser="llama3_json"))
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [
        ("toolCallParser", "'llama3_json' is not a tool call parser of Triton's OpenAI frontend (26.07); choose one "
                           "of: llama3, mistral, or none (no tool calls)")]
