"""Issue 44 item 2: verify's trace id is one the Collector's probabilistic_sampler keeps, so prod's 20% sampling
(components/k8s/otel_config.py, traces/sampled) never reads as a broken trace hop.

The algorithm is the processor's at open-telemetry/opentelemetry-collector-contrib@v0.143.0 (the opentelemetry-collector
chart 0.143.0's appVersion): proportional mode by default (processor/probabilisticsamplerprocessor/sampler_mode.go,
makeSampler; config.go: sampling_precision 4), randomness = the trace id's bytes 9-15 (pkg/sampling/randomness.go),
threshold = pkg/sampling/probability.go ProbabilityToThresholdWithPrecision, kept when randomness >= threshold
(pkg/sampling/threshold.go); and the legacy hash_seed mode's FNV-1a (fnvhasher.go) with 14-bit buckets. Known
answers: the t-values of pkg/sampling/probability_test.go's examples and cases, and Go hash/fnv's FNV-1a 32 golden
values (go/src/hash/fnv/fnv_test.go golden32a).
"""

from __future__ import annotations

from typing import Any

import pytest

from infra.verify import gateway
from infra.verify.endpoints import Endpoints, Unreachable
from infra.verify.sampling import (
    MAX_ADJUSTED_COUNT,
    fnv1a32,
    hash_bucket,
    hash_seed_keeps,
    kept_trace_id,
    proportional_keeps,
    randomness,
    scaled_sample_rate,
    t_value,
    threshold,
)
from tests.support.stacks import stack_config


@pytest.mark.parametrize(("data", "h"), [(b"", 0x811C9DC5), (b"a", 0xE40C292C), (b"ab", 0x4D2505CA),
                                         (b"abc", 0x1A47E90B)])
def test_fnv1a32_is_gos_hash_fnv_new32a(data: bytes, h: int) -> None:
    assert fnv1a32(data) == h


@pytest.mark.parametrize(("ratio", "precision", "tvalue"), [
    (1 / 3, 3, "aab"), (2 / 3, 3, "555"), (1.0, 3, "0"),  # ExampleProbabilityToThresholdWithPrecision
    (1 - 0x456789A / 2**28, 4, "4568"), (1 - 0x456789A / 2**28, 6, "45678a"),  # rounding down
    (1 - 0x789ABCDEF / 2**40, 3, "078a"), (1 - 0x789ABCDEF / 2**40, 1, "08"),  # leading zero, rounding up
    (1 - 0x80801 / 2**28, 1, "008"),
])
def test_threshold_matches_the_upstream_t_values(ratio: float, precision: int, tvalue: str) -> None:
    assert t_value(threshold(ratio, precision)) == tvalue


def test_prods_twenty_percent_keeps_the_trace_ids_at_or_above_threshold_cccd() -> None:
    """20% at the default precision: threshold 0xcccd << 40; bytes 9-15 decide, byte 8 is ignored."""
    assert threshold(0.2) == 0xCCCD << 40
    kept, dropped = "0" * 16 + "ffcccd0000000000", "0" * 16 + "00cccc" + "f" * 10
    assert (randomness(kept), proportional_keeps(kept, 0.2)) == (0xCCCD << 40, True)
    assert proportional_keeps(dropped, 0.2) is False
    assert proportional_keeps(dropped, 1.0) is True and proportional_keeps(kept, 0.0) is False


def test_hash_seed_mode_scales_the_percentage_in_float32_and_truncates() -> None:
    assert (scaled_sample_rate(20), scaled_sample_rate(0.01), scaled_sample_rate(100), scaled_sample_rate(250)) == \
        (3276, 1, 16384, 16384)
    tid = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert hash_bucket(tid) == fnv1a32(bytes(4) + bytes.fromhex(tid)) & 0x3FFF
    assert hash_seed_keeps(tid, 100.0) is True


def test_the_kits_processor_sets_only_the_percentage_so_the_default_mode_and_precision_apply() -> None:
    from components.k8s.otel_config import collector_config

    assert collector_config(stack_config("prod"))["processors"]["probabilistic_sampler"] == \
        {"sampling_percentage": 20.0}


def test_verifys_trace_ids_are_kept_in_either_mode_at_every_percentage() -> None:
    ids = {kept_trace_id() for _ in range(8)}
    assert len(ids) == 8  # fresh each time: Jaeger's lookup finds this run's trace only
    for tid in ids:
        assert len(tid) == 32 and int(tid, 16) != 0
        assert randomness(tid) == MAX_ADJUSTED_COUNT - 1 and hash_bucket(tid) == 0
        assert all(proportional_keeps(tid, r) for r in (1e-4, 0.01, 0.2, 0.5, 0.999, 1.0))
        assert all(hash_seed_keeps(tid, p) for p in (0.01, 1, 20, 50, 100))


def test_the_request_carries_a_kept_trace_id_in_traceparent_and_x_client_trace_id(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, str]] = []

    def post(endpoints: Endpoints, path: str, body: bytes, headers: dict[str, str], *, timeout: float) -> Any:
        seen.append(dict(headers))
        raise Unreachable("not here")

    monkeypatch.setattr(gateway, "_post", post)
    model = next(iter(stack_config("prod").models.values()))
    _, sent = gateway.request_hops(Endpoints("http://gw", "http://p", "http://j", "http://l", "http://a"), model,
                                   None, timeout=1)
    first = seen[0]
    assert first["traceparent"].split("-")[1] == first["x-client-trace-id"] == sent.trace_id
    assert (randomness(sent.trace_id), hash_bucket(sent.trace_id)) == (MAX_ADJUSTED_COUNT - 1, 0)
