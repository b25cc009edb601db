"""A model that cannot fit its GPUs is refused, with what would fit (issue: 405B in BF16 on one 48 GB L40S was
"valid"). Known answers worked by hand from parameter counts: BF16 2 bytes, fp8 1, AWQ 0.5 per parameter."""

from __future__ import annotations

import pytest

from components.k8s.memory_fit import MIN_KV_SHARE, memory_fit

GIB = 1 << 30


def test_405b_in_bf16_on_one_l40s_does_not_fit_and_says_what_would() -> None:
    fit = memory_fit(model_id="meta-llama/Llama-3.1-405B-Instruct", quantization="none", configured_gib=None,
                     gpus=1, gpu_memory_gib=48, utilization=0.92)
    assert fit is not None and not fit.fits
    assert fit.weights_gib == pytest.approx(405e9 * 2 / GIB)  # 754.4 GiB
    assert fit.explain() == (
        "needs 754.4 GiB of weights (none) plus a KV cache of at least 10% of the engine's memory, 838.2 GiB in all; "
        "the replica has 1 x 48 GiB x 0.92 = 44.2 GiB; would fit: 19 GPUs of this kind (tensorParallel x "
        "pipelineParallel)")


def test_70b_bf16_fits_two_h100s_and_not_one() -> None:
    two = memory_fit(model_id="meta-llama/Llama-3.3-70B-Instruct", quantization="none", configured_gib=None,
                     gpus=2, gpu_memory_gib=80, utilization=0.92)
    assert two is not None and two.fits  # 130.4 GiB of weights, 144.9 needed, 147.2 there
    one = memory_fit(model_id="meta-llama/Llama-3.3-70B-Instruct", quantization="none", configured_gib=None,
                     gpus=1, gpu_memory_gib=80, utilization=0.92)
    assert one is not None and not one.fits
    assert one.explain().endswith(
        "would fit: 2 GPUs of this kind (tensorParallel x pipelineParallel); quantization fp8 or awq; a pool of GPUs "
        "with at least 158 GiB (NVIDIA B200)")


def test_a_quantization_that_would_fit_is_named() -> None:
    fit = memory_fit(model_id="Qwen/Qwen2.5-72B-Instruct", quantization="none", configured_gib=None, gpus=2,
                     gpu_memory_gib=48, utilization=0.92)
    assert fit is not None and not fit.fits  # 134.1 GiB of BF16 weights on 88.3 GiB
    assert "quantization fp8 or awq" in fit.explain()  # 67.1 GiB (74.5 with the KV floor) and 33.5 GiB


def test_load_time_fp8_sits_in_gpu_memory_at_one_byte_per_parameter() -> None:
    fit = memory_fit(model_id="meta-llama/Llama-3.3-70B-Instruct", quantization="fp8", configured_gib=None, gpus=1,
                     gpu_memory_gib=80, utilization=0.92)
    assert fit is not None and fit.weights_gib == pytest.approx(70e9 / GIB) and fit.fits


def test_configured_weights_win_and_an_unknown_size_is_not_judged() -> None:
    fit = memory_fit(model_id="org/custom", quantization="none", configured_gib=39.0, gpus=1, gpu_memory_gib=48,
                     utilization=0.92)
    assert fit is not None and fit.fits  # 39 / 0.9 = 43.3 <= 48 x 0.92 = 44.16
    assert not memory_fit(model_id="org/custom", quantization="none", configured_gib=40.0, gpus=1,
                          gpu_memory_gib=48, utilization=0.92).fits  # type: ignore[union-attr]  # 44.4
    assert memory_fit(model_id="org/custom", quantization="none", configured_gib=None, gpus=1, gpu_memory_gib=48,
                      utilization=0.92) is None


def test_a_mig_slice_has_the_profiles_memory() -> None:
    fit = memory_fit(model_id="meta-llama/Llama-3.2-3B-Instruct", quantization="none", configured_gib=None, gpus=1,
                     gpu_memory_gib=80, utilization=0.92, mig_profile="1g.10gb")
    assert fit is not None and fit.usable_gib == pytest.approx(10 * 0.92) and fit.fits  # 5.6 GiB / 0.9 = 6.2
    assert MIN_KV_SHARE == 0.10
