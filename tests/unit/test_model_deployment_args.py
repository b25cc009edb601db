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
