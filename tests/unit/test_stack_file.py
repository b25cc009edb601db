"""A stack file is read as strictly as the Pulumi CLI decodes it (go-yaml/yaml@v3.0.1:decode.go): duplicate keys,
excessive aliasing and self-containing anchors are refused with the line; oversized files and settings outside
`config:` too. Each refusal: exit 2, no traceback, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra import stack_yaml
from infra.synth import StackFileError, load_stack

STACK = """\
config:
  aifactory:target: {provider: aws, region: us-east-1, availabilityZones: [us-east-1a, us-east-1b]}
  aifactory:cluster: {apiAccess: public-and-private, publicAccessCidrs: [203.0.113.0/24]}
  aifactory:nodePools:
    gpu-a: {instanceType: g6e.xlarge, minSize: 1, maxSize: 1}
  aifactory:tenants:
    t: {gpuQuota: 2}
  aifactory:models:
    chat: {engine: vllm, model: o/chat, toolCallParser: none, tenant: t, pool: gpu-a}
    embed: {engine: vllm, model: o/embed, tenant: t, pool: gpu-a, task: embed}
"""


def synth(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    stacks = tmp_path / "stacks"
    stacks.mkdir(exist_ok=True)
    (stacks / "Pulumi.s.yaml").write_text(text)
    exe = Path(sys.executable).with_name("aifactory")
    return subprocess.run([str(exe), "synth", "s", "--stacks-dir", str(stacks), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "AIFACTORY_DEBUG": ""},
                          check=False)


def refused(tmp_path: Path, text: str) -> str:
    res = synth(tmp_path, text)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert not (tmp_path / "out").exists(), "nothing is written for a refused stack file"
    return res.stderr


def test_the_fixture_stack_is_good(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.s.yaml").write_text(STACK)
    assert set(load_stack("s", tmp_path).models) == {"chat", "embed"}


def test_a_model_pasted_twice_is_refused_naming_both_lines(tmp_path: Path) -> None:
    """PyYAML keeps the second `chat:`, so the first model silently disappeared; go-yaml v3's decoder
    (`decoder.mapping`, unique keys by default) refuses the file, so `pulumi up` would too."""
    text = STACK + "    chat: {engine: vllm, model: o/other, toolCallParser: none, tenant: t, pool: gpu-a}\n"
    err = refused(tmp_path, text)
    assert (f"{tmp_path / 'stacks' / 'Pulumi.s.yaml'} line 11: models.chat: key 'chat' is already defined at line 9; "
            "the Pulumi CLI refuses duplicate keys (keep one, merge what you meant)") in err


def test_every_duplicate_key_is_reported_at_once_with_its_path(tmp_path: Path) -> None:
    text = (STACK.replace("    t: {gpuQuota: 2}\n", "    t: {gpuQuota: 2, gpuQuota: 3}\n")
            + "  aws:region: us-west-2\n  aws:region: us-east-1\n")
    err = refused(tmp_path, text)
    assert "line 7: tenants.t.gpuQuota: key 'gpuQuota' is already defined at line 7" in err
    assert "line 12: aws:region: key 'aws:region' is already defined at line 11" in err


def test_keys_that_differ_only_by_quoting_are_the_same_key(tmp_path: Path) -> None:
    # go-yaml compares the key nodes' kind and text, not their resolved tags: `1` and "1" collide.
    with pytest.raises(stack_yaml.StackYamlError) as exc:
        stack_yaml.load('a:\n  1: x\n  "1": y\n')
    assert exc.value.problems == [(3, "a.1: key '1' is already defined at line 2; the Pulumi CLI refuses "
                                      "duplicate keys (keep one, merge what you meant)")]


BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"] + [
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi", strict=True)]) + "\n"


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    """Nine levels of nine aliases: 10^8-odd values from a few hundred bytes. Constructed and turned into JSON it
    took minutes and gigabytes; refused from the composed graph, whose expansion is counted, not performed."""
    text = STACK + "  aifactory:tags:\n" + "".join(f"    {line}\n" for line in BOMB.splitlines())
    err = refused(tmp_path, text)
    # go-yaml counts every node decoded inside an alias expansion: list b holds 9 aliases of a (10 nodes each),
    # c 9 of b (1 + 9 x (1 + 10) nodes each), and so on up to i.
    sizes = [10]
    for _ in "bcdefgh":
        sizes.append(1 + 9 * (1 + sizes[-1]))
    aliased = sum(9 * n for n in sizes)
    assert aliased == 544_809_960
    # the key it expands under is named: tags.i, whose 9 aliases of h hold 9 x (1 + sizes[-1]) + 1 nodes
    assert 9 * (1 + sizes[-1]) + 1 == 484_275_610
    assert (f"{tmp_path / 'stacks' / 'Pulumi.s.yaml'} line 20: tags.i: YAML aliases expand the file to 544,810,123 "
            f"values, {aliased:,} of them from aliases, 484,275,610 under this key; the Pulumi CLI refuses excessive "
            "aliasing (go-yaml v3), and the kit reads at most 1,000,000 values: write the values out, or use fewer "
            "nested aliases") in err


def test_go_yamls_alias_ratio_is_followed() -> None:
    # go-yaml/yaml@v3.0.1:decode.go allowedAliasRatio: 0.99 up to 400,000 decodes, 0.10 from 4,000,000, linear between.
    assert stack_yaml.allowed_alias_ratio(1_000) == 0.99
    assert stack_yaml.allowed_alias_ratio(400_000) == 0.99
    assert stack_yaml.allowed_alias_ratio(2_200_000) == pytest.approx(0.545)
    assert stack_yaml.allowed_alias_ratio(4_000_000) == 0.10
    # 101 aliases of a 10-item list: 1,111+ decodes, ~91% from aliases: under 0.99, accepted (go-yaml would too).
    doc = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nb: [" + ", ".join(["*a"] * 101) + "]\n"
    assert len(stack_yaml.load(doc)["b"]) == 101
    # 120 aliases of one scalar in 1,200 values: only 10% from aliases, accepted.
    assert len(stack_yaml.load("a: &a x\nb: [" + ", ".join(["*a"] * 120 + ["y"] * 1_080) + "]\n")["b"]) == 1_200


def test_anchors_and_merge_keys_users_write_still_work(tmp_path: Path) -> None:
    text = STACK.replace("    chat: {engine: vllm, model: o/chat, toolCallParser: none, tenant: t, pool: gpu-a}\n",
                         "    chat: &m {engine: vllm, model: o/chat, toolCallParser: none, tenant: t, pool: gpu-a}\n"
                         "    chat2: {<<: *m, model: o/chat2}\n")
    (tmp_path / "Pulumi.s.yaml").write_text(text.replace("gpuQuota: 2", "gpuQuota: 3"))
    cfg = load_stack("s", tmp_path)
    assert cfg.models["chat2"].model == "o/chat2" and cfg.models["chat2"].pool == "gpu-a"


def test_an_anchor_that_contains_itself_is_refused(tmp_path: Path) -> None:
    err = refused(tmp_path, STACK + "  aifactory:tags: &t {loop: *t}\n")
    assert "line 11: an anchor's value contains itself" in err


def test_an_oversized_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    filler = "# " + "x" * 1_000 + "\n"
    text = STACK + filler * (stack_yaml.MAX_STACK_FILE_BYTES // len(filler) + 1)
    err = refused(tmp_path, text)
    assert (f"{tmp_path / 'stacks' / 'Pulumi.s.yaml'}: is {len(text):,} bytes, and no setting is over 2,048 characters "
            "(comments, or very many settings?): a stack file holds settings, not data, and may be at most 1,048,576 "
            "bytes") in err


def _oversized(tmp_path: Path, text: str) -> str:
    """What reading the stack file says (in-process: the message synth and validate print after `aifactory: `)."""
    (tmp_path / "Pulumi.s.yaml").write_text(text)
    with pytest.raises(StackFileError) as exc:
        load_stack("s", tmp_path)
    return str(exc.value).removeprefix(f"{tmp_path / 'Pulumi.s.yaml'} ")


LIMITS = "a stack file holds settings, not data, and may be at most 1,048,576 bytes"


@pytest.mark.parametrize("value", [
    "o/" + "x" * 1_999_998,
    "|\n" + "".join(f"        {'y' * 99}\n" for _ in range(20_000)),
], ids=["plain", "block"])
def test_a_value_that_makes_the_file_too_large_is_named_by_its_key_path(tmp_path: Path, value: str) -> None:
    """A 2 MB value pasted as models.X.model was refused as 'larger than 1,048,576 bytes' without its key: the
    YAML events of the file (never constructed) name the setting, its line and length."""
    text = STACK + f"    big:\n      engine: vllm\n      model: {value}\n      tenant: t\n      pool: gpu-a\n"
    assert _oversized(tmp_path, text) == (
        f"line 13: models.big.model: is 2,000,000 characters; a setting is at most 2,048, and this value makes the "
        f"file {len(text):,} bytes: {LIMITS}")


def test_a_value_longer_than_what_is_read_of_the_file_is_at_least_that_long(tmp_path: Path) -> None:
    """An oversized file is read only so far (OVERSIZED_SCAN_BYTES) to find the value: a quoted one still open
    there is named with the length read."""
    opening = STACK + '  aifactory:cluster2: {name: "'
    text = opening + "z" * stack_yaml.OVERSIZED_SCAN_BYTES + '"}\n'
    read = stack_yaml.OVERSIZED_SCAN_BYTES - len(opening) + len(': "')  # counted from the end of its key
    assert _oversized(tmp_path, text) == (
        f"line 11: cluster2.name: is at least {read:,} characters; a setting is at most 2,048, and this value makes "
        f"the file {len(text):,} bytes: {LIMITS}")


def test_settings_at_the_top_level_are_said_to_belong_under_config(tmp_path: Path) -> None:
    """Without `config:` the kit saw no settings and said only 'target: is required'; the misplaced keys reached
    nobody (the CLI hands a program only the `config:` mapping)."""
    doc = yaml.safe_load(STACK)["config"]
    text = yaml.safe_dump({k.removeprefix("aifactory:"): v for k, v in doc.items()}, sort_keys=False)
    err = refused(tmp_path, text)
    assert ("target, cluster, nodePools, tenants, models: the kit's settings must sit under 'config:' (indented "
            "below a top-level `config:` line)") in err
    assert "is required" not in err


def test_namespaced_keys_at_the_top_level_are_said_to_belong_under_config(tmp_path: Path) -> None:
    err = refused(tmp_path, STACK + "aifactory:gateway: {minReplicas: 3}\n")
    assert "aifactory:gateway: the kit's settings must sit under 'config:'" in err


def _unwritable(tmp_path: Path) -> Path:
    """A directory this process cannot create files in: sysfs for root (permission bits do not stop root), else a
    directory without write permission."""
    if os.geteuid() == 0:
        return Path("/sys")
    d = tmp_path / "read-only"
    d.mkdir()
    d.chmod(0o555)
    return d


def test_an_unwritable_output_location_is_refused_before_the_program_runs(tmp_path: Path) -> None:
    """A read-only (or full) output disk gave a raw OSError without its path, after the whole program had run."""
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "Pulumi.s.yaml").write_text(STACK)
    target = _unwritable(tmp_path)
    exe = Path(sys.executable).with_name("aifactory")
    res = subprocess.run([str(exe), "synth", "s", "--stacks-dir", str(stacks), "--out", str(target / "out" / "s")],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "AIFACTORY_DEBUG": ""},
                         check=False)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert f"--out {target / 'out' / 's'}: cannot write in {target}: " in res.stderr
    assert "[2/3] program" not in res.stdout + res.stderr, "refused before the program runs"


def test_plain_scalars_get_the_types_the_pulumi_cli_gives_them() -> None:
    """go-yaml v3 (the CLI's decoder) resolves plain scalars by YAML 1.2's core schema, where PyYAML uses YAML 1.1:
    `1e23` is a number (1.1: a string, so validate said "expected an integer, got a string"), `yes`/`on` are strings
    (1.1: booleans, so validate accepted what pulumi up hands over as text), `12:30` a string (1.1: 750)
    (go-yaml/yaml@v3.0.1 resolve.go)."""
    doc = ("a: 1e23\nb: 123\nc: -2E-3\nd: '1e23'\ne: .5\nf: yes\ng: on\nh: 12:30\ni: 0777\nj: 0o17\nk: 0x1F\n"
           "l: 1_000\nm: True\nn: ~\no: -.inf\np: 1.2.3\nq: 2026-12-01\n")
    assert stack_yaml.load(doc) == {
        "a": 1e23, "b": 123, "c": -0.002, "d": "1e23", "e": 0.5, "f": "yes", "g": "on", "h": "12:30", "i": 511,
        "j": 15, "k": 31, "l": 1000, "m": True, "n": None, "o": float("-inf"), "p": "1.2.3", "q": "2026-12-01"}
    assert type(stack_yaml.load("b: 123\n")["b"]) is int
