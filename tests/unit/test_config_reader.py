"""How config validation reports bad input (infra/config.py's reader): every problem names the key path, the value
and what is allowed, and the reader keeps going so one run lists them all.

YAML allows non-string mapping keys (`1: x` is an integer key, YAML 1.2 core schema) and null values; Pulumi
stack config hands them to the kit as parsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from components.k8s.settings import setting
from infra.config import ConfigError, parse
from infra.stack import declared
from infra.stack.reader import _Reader
from tests.support.stacks import stack_raw


def _problems(r: _Reader) -> list[str]:
    return [str(p) for p in r.problems]


def test_a_mapping_keeps_its_good_keys_and_names_each_bad_one() -> None:
    r = _Reader()
    good = r.mapping({1: "a", "x": 2, "zz": 3, "y": 4}, "gateway.retries", ("x", "y"))
    assert good == {"x": 2, "y": 4}
    assert _problems(r) == ["gateway.retries: key 1 is not a string",
                            "gateway.retries.zz: unknown key; allowed keys: x, y"]
    assert r.mapping(["not", "a", "mapping"], "gateway", None) is None
    assert _problems(r)[-1] == 'gateway: expected a mapping, got a list ["not", "a", "mapping"]'
    assert r.mapping(None, "gateway.auth", None) is None
    assert _problems(r)[-1] == "gateway.auth: expected a mapping, got null"


@dataclass(frozen=True)
class _Collections:
    """A section of the collections pydantic validates for the stack model (infra/stack/declared.py)."""

    labels: Mapping[str, str] = setting(default_factory=dict, doc="A mapping of strings.")
    zones: tuple[str, ...] = setting(("x",), doc="A list of strings.")
    lower: tuple[str, ...] = setting((), pattern=r"^[a-z]+$", invalid="is upper", doc="A list of patterned strings.")
    counts: Mapping[str, int] = setting(default_factory=dict, ge=0, le=9, pattern=r"^[a-z]+$", invalid="is upper",
                                        item="a count", doc="A mapping of bounded numbers by patterned key.")


def test_a_string_map_keeps_string_pairs_and_names_every_other_entry() -> None:
    r = _Reader()
    got = declared.values(r, _Collections, {"labels": {"team": "ml", "tier": 2, "on": None, 3: "x"}}, "nodePools.gpu")
    assert got["labels"] == {"team": "ml"}
    # a null value and a non-string key are refused too, at their paths; null is said once ("got null")
    assert _problems(r) == ["nodePools.gpu.labels.tier: expected a string value, got an integer 2",
                            "nodePools.gpu.labels.on: expected a string value, got null",
                            "nodePools.gpu.labels.3: key 3 is not a string"]
    assert declared.values(r, _Collections, {}, "nodePools.gpu")["labels"] == {}
    assert declared.values(r, _Collections, {"labels": "team=ml"}, "nodePools.gpu")["labels"] == {}
    assert _problems(r)[-1] == "nodePools.gpu.labels: expected a mapping, got a string 'team=ml'"


def test_a_mapping_of_numbers_keeps_good_entries_and_names_each_bad_key_and_value() -> None:
    r = _Reader()
    got = declared.values(r, _Collections, {"counts": {"a": 1, "B": 2, "c": -1, "d": 1.5, "e": True, "f": 9}}, "s")
    assert got["counts"] == {"a": 1, "f": 9}
    assert _problems(r) == ["s.counts.B: is upper",
                            "s.counts.c: expected a count (an integer >= 0 and <= 9), got -1",
                            "s.counts.d: expected a count (an integer >= 0 and <= 9), got 1.5",
                            "s.counts.e: expected a count (an integer >= 0 and <= 9), got true"]


def test_pool_labels_reach_the_pool_and_a_bad_one_fails_parse_with_its_path() -> None:
    raw = stack_raw("dev")
    pool = next(iter(raw["nodePools"]))
    raw["nodePools"][pool]["labels"] = {"team": "ml"}
    assert parse(raw, stack="dev").node_pools[pool].labels == {"team": "ml"}
    raw["nodePools"][pool]["labels"] = {"team": 7}
    with pytest.raises(ConfigError) as err:
        parse(raw, stack="dev")
    assert [str(p) for p in err.value.problems] == [f"nodePools.{pool}.labels.team: expected a string value, "
                                                    "got an integer 7"]


def test_a_string_list_keeps_its_strings_and_names_each_other_item() -> None:
    r = _Reader()
    assert declared.values(r, _Collections, {"zones": ["a", 2, "b"]}, "target")["zones"] == ("a", "b")
    assert declared.values(r, _Collections, {"zones": "a"}, "target")["zones"] == ("x",)  # the default
    assert declared.values(r, _Collections, {"lower": ["a", "B", 3, "C"]}, "target")["lower"] == ("a",)
    assert _problems(r) == ["target.zones[1]: expected a string, got an integer 2",
                            "target.zones: expected a list, got a string 'a'",
                            "target.lower[1]: 'B' is upper",
                            "target.lower[2]: expected a string, got an integer 3",
                            "target.lower[3]: 'C' is upper"]


def test_names_of_pools_tenants_and_models_are_dns_labels() -> None:
    r = _Reader()
    assert r.named({"gpu-a": {}, "GPU_B": {}, "c": "not a mapping"}, "nodePools") == {"gpu-a": {}}
    assert _problems(r) == ["nodePools.GPU_B: name must be a DNS label (lowercase letters, digits and '-', at most 63 "
                            "characters)",
                            "nodePools.c: expected a mapping, got a string 'not a mapping'"]


def test_a_key_set_to_null_is_unset_everywhere_the_reader_looks() -> None:
    """`endTime:` left empty in YAML is null: it used to pass the capacity-block window's "is required" check
    (which asked `key in d`) and leave the block without an end; value() already read it as unset."""
    raw = stack_raw("prod")
    raw["nodePools"]["h100-block"]["capacity"]["endTime"] = None
    with pytest.raises(ConfigError) as err:
        parse(raw, stack="prod")
    assert [p.path for p in err.value.problems] == ["nodePools.h100-block.capacity.endTime"]
    assert "is required for capacity type 'capacity-block'" in str(err.value.problems[0])


def test_a_variant_marked_with_null_is_still_a_variant() -> None:
    """`variant:` alone marks a variant with every default: null keeps that meaning there (it is not left out as
    unset), so the variant is read and asked for its throughput or cost."""
    m = {"engine": "vllm", "model": "org/model", "toolCallParser": "none",
         "tenant": "alpha", "pool": "gpu", "workload": "plan"}
    raw = {"target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
           "nodePools": {"gpu": {"instanceType": "dgx-h100"}}, "tenants": {"alpha": {"gpuQuota": 16}},
           "models": {"slow": {**m, "slo": {"e2eSeconds": 2}, "variant": {"costPerRequest": 0.001}},
                      "fast": {**m, "slo": {"e2eSeconds": 0.5}, "variant": None}},
           "observability": {"prices": {"dgx-h100": 30.0}}}
    with pytest.raises(ConfigError) as err:
        parse(raw, stack="t")
    assert [p.path for p in err.value.problems] == ["models.fast.variant.requestsPerSecond"]
    raw["models"]["fast"]["variant"] = {"requestsPerSecond": 4}
    assert parse(raw, stack="t").models["fast"].variant is not None
