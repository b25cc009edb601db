"""models.X.tokenizer: the tokenizer an engine builds prompts with, a Hub id or a directory in the model's storage.

Triton's OpenAI frontend takes `--tokenizer` and loads it with transformers' AutoTokenizer.from_pretrained
(triton-inference-server/server@r26.07 python/openai/openai_frontend/engine/utils/tokenizer.py get_tokenizer; main.py:
"HuggingFace ID or local folder path"), which downloads a Hub id at start-up: a pvc:// Triton model of a tenant
without HTTPS egress (onprem's classifier) could not start with the model id the kit passed by default. vLLM
(`--tokenizer`, v0.33.0 and v0.27.1 vllm/engine/arg_utils.py; ModelConfig.tokenizer defaults to the model) and SGLang
(`--tokenizer-path`, 0.5.23 srt/arg_groups/fields/serving.py; defaults to --model-path) take it too when it is set.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from components.k8s.engines import ENGINES
from components.k8s.engines.base import tokenizer_path
from components.k8s.engines.sglang import sglang_args
from components.k8s.engines.triton import triton_frontend_args
from components.k8s.engines.vllm import vllm_args
from components.k8s.serving.args import serving_spec
from infra.component_args import model_deployment_args
from infra.config import ConfigError, PlatformConfig, parse
from tests.support.stacks import stack_config


def one_model(**model: Any) -> PlatformConfig:
    """A one-model stack on an existing cluster (8 x H100 nodes): Triton on a claim unless `model` says otherwise."""
    return parse({
        "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
        "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
        "tenants": {"t": {"gpuQuota": 8}},
        "models": {"m": {"engine": "triton", "model": "org/m-8b", "uri": "pvc://store/engines/m", "tenant": "t",
                         "pool": "gpu", "weightsGiB": 16, "toolCallParser": "none", **model}},
        "observability": {"prices": {"dgx-h100": 30.0}},
    }, stack="t")


def _problems(**model: Any) -> str:
    with pytest.raises(ConfigError) as e:
        one_model(**model)
    return str(e.value)


@pytest.mark.parametrize(("tokenizer", "flag"), [
    (None, "--tokenizer=org/m-8b"),  # the model id, from the Hub
    ("org/m-8b-tokenizer", "--tokenizer=org/m-8b-tokenizer"),  # another Hub id
    ("gpt2", "--tokenizer=gpt2"),  # a Hub id without an organisation
    ("../tokenizer", "--tokenizer=/models/store/engines/tokenizer"),  # beside the repository, on the claim
    ("../../shared/tok/", "--tokenizer=/models/store/shared/tok"),  # anywhere on the claim
    (".", "--tokenizer=/models/store/engines/m"),  # files in the repository's root
])
def test_triton_loads_the_tokenizer_the_setting_names(tokenizer: str | None, flag: str) -> None:
    model = one_model(**({"tokenizer": tokenizer} if tokenizer is not None else {})).models["m"]
    args = triton_frontend_args(model)
    assert [a for a in args if a.startswith("--tokenizer")] == [flag]
    assert args[0] == "--model-repository=/models/store/engines/m"


def test_onprems_classifier_reads_its_tokenizer_from_its_claim() -> None:
    """The analytics tenant has only pvc:// models, so no HTTPS egress (components.k8s.tenancy opens it for a
    tenant with a downloading model only): its Triton classifier loads its tokenizer from the claim."""
    cfg = stack_config("onprem")
    model = cfg.models["classifier"]
    assert (model.engine, model.uri, model.tokenizer) == ("triton", "pvc://model-store/classifier-trt",
                                                          "../classifier-tokenizer")
    assert not any(m.uri.startswith(("hf://", "s3://")) for m in cfg.models.values() if m.tenant == model.tenant)
    assert "--tokenizer=/models/model-store/classifier-tokenizer" in ENGINES["triton"].command(model)
    # the ModelDeployment component the program creates gets it through its args
    args = model_deployment_args(cfg, model)
    assert args["tokenizer"] == "../classifier-tokenizer"
    assert serving_spec("model-classifier", args).model.tokenizer == "../classifier-tokenizer"


def test_vllm_and_sglang_pass_the_tokenizer_only_when_it_is_set() -> None:
    s3 = dataclasses.replace(one_model(engine="vllm").models["m"], uri="s3://bucket/m", tokenizer="./tokenizer")
    assert ENGINES["vllm"].model_problems(s3) == []
    assert vllm_args(s3)[13:] == ["--tokenizer", "/model-cache/m/tokenizer", "--enable-prefix-caching"]
    assert "--tokenizer" not in vllm_args(one_model(engine="vllm").models["m"])
    sglang = one_model(engine="sglang", tokenizer="org/tok").models["m"]
    assert sglang_args(sglang)[13:15] == ["--tokenizer-path", "org/tok"]
    assert not any(a.startswith("--tokenizer") for a in sglang_args(one_model(engine="sglang").models["m"]))


@pytest.mark.parametrize(("model", "problem"), [
    ({"tokenizer": "/models/store/tok"},
     "models.m.tokenizer: '/models/store/tok' is neither a Hugging Face Hub id (ORG/NAME) nor a directory in the "
     "model's storage relative to its uri (./DIR or ../DIR)"),
    ({"tokenizer": "tok/../x"}, "models.m.tokenizer: 'tok/../x' is neither a Hugging Face Hub id"),
    ({"tokenizer": "../../../etc"},
     "models.m.tokenizer: '../../../etc' leads out of the model's storage (/models/etc); the pod mounts only "
     "/models/store of uri pvc://store/engines/m: give a directory within it"),
    ({"engine": "sglang", "uri": "hf://org/m-8b", "tokenizer": "./tok"},
     "models.m.tokenizer: './tok' is a directory in the model's storage, but uri hf://org/m-8b is downloaded from the "
     "Hub into a cache of its own; give the tokenizer's Hub id (ORG/NAME)"),
    ({"tokenizer": "./tokenizer"},
     "models.m.tokenizer: './tokenizer' is a directory of the model repository (/models/store/engines/m), which "
     "Triton would load as a model at start-up; keep the tokenizer beside the repository (e.g. ../tokenizer) or in "
     "its root (.)"),
])
def test_a_tokenizer_the_pod_cannot_read_is_refused_with_its_key(model: dict[str, Any], problem: str) -> None:
    assert problem in _problems(**model)


def test_an_s3_models_tokenizer_stays_in_its_download() -> None:
    """An s3:// model's pod mounts its own download (components.k8s.engines.base.model_path), nothing beside it."""
    s3 = dataclasses.replace(one_model(engine="vllm").models["m"], uri="s3://bucket/m", tokenizer="../tok")
    assert ENGINES["vllm"].model_problems(s3) == [
        ("tokenizer", "'../tok' leads out of the model's storage (/model-cache/tok); the pod mounts only "
                      "/model-cache/m of uri s3://bucket/m: give a directory within it")]


def test_a_relative_tokenizer_is_resolved_from_the_model_path_and_a_hub_id_is_kept() -> None:
    vllm = one_model(engine="vllm", tokenizer="./tok/").models["m"]
    assert tokenizer_path(vllm) == "/models/store/engines/m/tok"  # vLLM reads a directory in its weights' tree
    assert tokenizer_path(one_model().models["m"]) is None


@pytest.mark.parametrize("model", [
    {"engine": "vllm", "toolCallParser": "hermes", "tokenizer": "./tok"},
    {"engine": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct", "toolCallParser": "none"},
    {"engine": "triton", "model": "meta-llama/Llama-3.1-8B-Instruct", "toolCallParser": "none",
     "tokenizer": "../tok"},
    {"engine": "sglang", "tokenizer": "org/tok"},
])
def test_the_model_deployment_runs_the_command_the_stack_model_gives(model: dict[str, Any]) -> None:
    """The program creates each model as a ModelDeployment from its args (infra.component_args): the engine
    settings the stack file gives reach the pod's command. toolCallParser once did not (the family's parser, or
    none, ran instead)."""
    cfg = one_model(**model)
    m = cfg.models["m"]
    deployed = serving_spec("model-m", model_deployment_args(cfg, m)).model
    engine = ENGINES[m.engine]
    assert engine.command(deployed) == engine.command(m)
    assert (deployed.tool_call_parser, deployed.tokenizer) == (model.get("toolCallParser", "none"),
                                                             model.get("tokenizer"))


def test_a_tokenizer_from_the_hub_opens_its_tenants_https_egress_and_one_on_the_claim_does_not() -> None:
    """Triton's frontend downloads a Hub id as it starts (the module docstring), so a pvc:// Triton model without a
    tokenizer directory gets its tenant the egress an hf:// model gets (allow-model-downloads); onprem's classifier
    reads its tokenizer from its claim, and its tenant (only pvc:// models) keeps none."""
    from components.k8s import tenancy
    from infra.component_args import tenancy_args

    def egress(cfg: PlatformConfig, tenant: str) -> bool:
        spec = tenancy.tenancy_spec("tenancy", tenancy_args(cfg))
        names = [p["metadata"]["name"] for p in tenancy.network_policies(spec, cfg.tenants[tenant])]
        return "allow-model-downloads" in names

    assert egress(one_model(), "t")  # Triton, --tokenizer=org/m-8b
    assert not egress(one_model(tokenizer="."), "t")  # the claim's directory
    assert egress(one_model(engine="vllm", tokenizer="org/m-8b-tokenizer"), "t")  # a Hub id, whatever the engine
    assert not egress(one_model(engine="vllm"), "t")  # vLLM reads the one beside its weights
    onprem = stack_config("onprem")
    assert onprem.models["classifier"].tokenizer == "../classifier-tokenizer"
    assert not egress(onprem, "analytics")
