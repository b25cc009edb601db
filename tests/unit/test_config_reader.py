"""How config validation reports bad input (infra/config.py's reader): every problem names the key path, the value
and what is allowed, and the reader keeps going so one run lists them all.

YAML allows non-string mapping keys (`1: x` is an integer key, YAML 1.2 core schema) and null values; Pulumi
stack config hands them to the kit as parsed.
"""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import ConfigError, parse
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


@pytest.mark.parametrize(("raw", "want", "problems"), [
    ({"k": 3}, 3, []),
    ({"k": "three"}, "three", []),
    ({"k": 1.5}, None, ["p.k: expected an integer or a string, got a number 1.5"]),
    ({"k": True}, None, ["p.k: expected an integer or a string, got a boolean true"]),
])
def test_a_value_of_one_of_several_kinds(raw: dict[str, Any], want: Any, problems: list[str]) -> None:
    r = _Reader()
    assert r.value(raw, "k", "p", (int, str), None) == want
    assert _problems(r) == problems


def test_an_integer_is_a_number_where_a_number_or_a_string_is_wanted() -> None:
    r = _Reader()
    got = r.value({"k": 2}, "k", "p", (float, str), None)
    assert (got, type(got)) == (2.0, float)
    assert _problems(r) == []


def test_a_string_map_keeps_string_pairs_and_names_every_other_entry() -> None:
    r = _Reader()
    got = r.string_map({"labels": {"team": "ml", "tier": 2, "on": None, 3: "x"}}, "labels", "nodePools.gpu")
    assert got == {"team": "ml"}
    assert _problems(r)[0] == "nodePools.gpu.labels.tier: expected a string value, got an integer 2"
    # a null value and a non-string key are refused too, at their paths; null is said once ("got null")
    assert [p.path for p in r.problems][1:] == ["nodePools.gpu.labels.on", "nodePools.gpu.labels.3"]
    assert _problems(r)[1] == "nodePools.gpu.labels.on: expected a string value, got null"
    assert r.string_map({}, "labels", "nodePools.gpu") == {}
    assert r.string_map({"labels": "team=ml"}, "labels", "nodePools.gpu") == {}
    assert _problems(r)[-1] == "nodePools.gpu.labels: expected a mapping, got a string 'team=ml'"


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


def test_null_as_an_allowed_kind_is_named_null() -> None:
    r = _Reader()
    assert r.value({"k": 5}, "k", "p", (str, type(None)), "d") == "d"
    assert _problems(r) == ["p.k: expected a string or null, got an integer 5"]


@pytest.mark.parametrize(("value", "options", "problem"), [
    ("x", {}, "p.k: expected an integer, got a string 'x'"),
    (4, {"choices": (1, 2)}, "p.k: 4 is not allowed; choose one of: 1, 2"),
    (0, {"minimum": 1}, "p.k: 0 is below the minimum 1"),
    (11, {"maximum": 10}, "p.k: 11 is above the maximum 10"),
    (3, {"check": lambda v: "must be even" if v % 2 else None}, "p.k: 3 must be even"),
])
def test_a_refused_value_falls_back_to_the_default_or_to_none_when_required(value: Any, options: dict[str, Any],
                                                                           problem: str) -> None:
    """One problem per refused value; the walk goes on with the default (or nothing, for a required key), so a
    later check does not report the same mistake again."""
    r = _Reader()
    assert r.value({"k": value}, "k", "p", int, 6, **options) == 6
    assert r.value({"k": value}, "k", "p", int, **options) is None
    assert _problems(r) == [problem, problem]
    assert r.value({}, "k", "p", int) is None
    assert _problems(r)[-1] == "p.k: is required"
    assert r.value(None, "k", "p", int) is None and len(r.problems) == 3


def test_a_string_list_keeps_its_strings_and_names_each_other_item() -> None:
    r = _Reader()
    assert r.strings({"zones": ["a", 2, "b"]}, "zones", "target") == ("a", "b")
    assert r.strings({"zones": "a"}, "zones", "target", default=("x",)) == ("x",)
    assert r.strings({"zones": ["a", "B"]}, "zones", "target", check=lambda v: None if v.islower() else "is upper"
                     ) == ("a",)
    assert _problems(r) == ["target.zones[1]: expected a string, got an integer 2",
                            "target.zones: expected a list, got a string 'a'",
                            "target.zones[1]: 'B' is upper"]


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
