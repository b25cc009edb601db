"""The trace id verify sends: one the Collector's `probabilistic_sampler` keeps, so that a trace missing from Jaeger
means a broken hop, never the sampler's choice (issue 44 item 2; the kit's processor config:
components.k8s.otel_config, `sampling_percentage` only).

The processor's decision by trace id (open-telemetry/opentelemetry-collector-contrib@v0.143.0, the chart 0.143.0's
appVersion; processor/probabilisticsamplerprocessor and pkg/sampling):

- mode: without `mode` and without `hash_seed` (the kit sets neither) it is `proportional` (sampler_mode.go,
  makeSampler: DefaultMode = Proportional; hash_seed only when a seed is set). The span's randomness is the trace
  id's least-significant 56 bits, bytes 9-15 (randomness.go, TraceIDToRandomness), unless its tracestate carries an
  OTel r-value (none of verify's, the gateway's or the engine's spans do). The threshold is the rejected share of
  2^56 rounded to `sampling_precision` hex digits, default 4 (probability.go, ProbabilityToThresholdWithPrecision;
  config.go). A span is kept when randomness >= threshold (threshold.go, ShouldSample).
- `hash_seed` (the legacy mode, chosen when a seed is set): FNV-1a 32 over the seed's 4 little-endian bytes and then
  the 16 trace id bytes (fnvhasher.go, computeHash); kept when the hash's low 14 bits are below
  uint32(float32(percent) * 16384/100) (sampler_mode.go, randomnessFromBytes and makeSampler).

`kept_trace_id` draws an id kept in both modes at every percentage that keeps anything: its last 7 bytes are all
ones (the largest randomness, at or above every threshold below 2^56) and the first 9 are drawn until the FNV-1a
hash with seed 0 falls in bucket 0.
"""

from __future__ import annotations

import math
import secrets
import struct

__all__ = ["MAX_ADJUSTED_COUNT", "DEFAULT_PRECISION", "randomness", "threshold", "t_value", "proportional_keeps",
           "fnv1a32", "hash_bucket", "scaled_sample_rate", "hash_seed_keeps", "kept_trace_id"]

MAX_ADJUSTED_COUNT = 1 << 56  # pkg/sampling threshold.go: 2^56
NUM_HEX_DIGITS = 14
DEFAULT_PRECISION = 4  # config.go: sampling_precision's default
HASH_BUCKETS = 1 << 14  # sampler_mode.go: numHashBuckets
_FNV_OFFSET, _FNV_PRIME = 0x811C9DC5, 0x01000193
_ONES = b"\xff" * 7
_MAX_DRAWS = 1 << 22  # bucket 0 is 1 in 16384: a miss in 2^22 draws has probability e^-256


def randomness(trace_id: str) -> int:
    """The trace id's 56 bits of W3C randomness (bytes 9-15)."""
    return int(trace_id[16:], 16) & (MAX_ADJUSTED_COUNT - 1)


def threshold(ratio: float, precision: int = DEFAULT_PRECISION) -> int:
    """The rejection threshold of a sampling ratio in (2^-56, 1), rounded to `precision` hex digits past the
    leading zeros, as ProbabilityToThresholdWithPrecision computes it."""
    if ratio >= 1:
        return 0
    reject = 1 - ratio
    while reject * 16 < 1:
        reject *= 16
        precision += 1
    scaled = ratio * MAX_ADJUSTED_COUNT
    rejected = MAX_ADJUSTED_COUNT - (math.floor(scaled) + (scaled - math.floor(scaled) >= 0.5))  # Go's math.Round
    shift = 4 * (NUM_HEX_DIGITS - precision)
    return ((rejected + (1 << (shift - 1))) >> shift) << shift


def t_value(th: int) -> str:
    """The threshold's OTel t-value (14 hex digits, trailing zeros dropped; "0" for always)."""
    return "0" if th == 0 else f"{th:014x}".rstrip("0")


def proportional_keeps(trace_id: str, ratio: float, precision: int = DEFAULT_PRECISION) -> bool:
    return ratio >= 1 or (ratio > 0 and randomness(trace_id) >= threshold(ratio, precision))


def fnv1a32(data: bytes, h: int = _FNV_OFFSET) -> int:
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & 0xFFFFFFFF
    return h


def hash_bucket(trace_id: str, seed: int = 0) -> int:
    return fnv1a32(seed.to_bytes(4, "little") + bytes.fromhex(trace_id)) & (HASH_BUCKETS - 1)


def _f32(x: float) -> float:
    value: float = struct.unpack("<f", struct.pack("<f", x))[0]
    return value


def scaled_sample_rate(percent: float) -> int:
    """uint32(pct * percentageScaleFactor) in float32, as the processor computes it (percent above 100 is 100)."""
    return int(_f32(_f32(min(percent, 100)) * _f32(HASH_BUCKETS / 100)))


def hash_seed_keeps(trace_id: str, percent: float, seed: int = 0) -> bool:
    return hash_bucket(trace_id, seed) < scaled_sample_rate(percent)


def kept_trace_id() -> str:
    """A fresh trace id (hex) the sampler keeps in either mode at any percentage that keeps anything."""
    head = secrets.token_bytes(6)
    start = fnv1a32(bytes(4) + head)
    for n in range(secrets.randbelow(1 << 24), (1 << 24) + _MAX_DRAWS):
        middle = (n & 0xFFFFFF).to_bytes(3, "big")
        if fnv1a32(middle + _ONES, start) & (HASH_BUCKETS - 1) == 0:
            return (head + middle + _ONES).hex()
    raise RuntimeError("no trace id in hash bucket 0 within the bound")  # pragma: no cover (p = e^-256)
