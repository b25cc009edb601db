"""Every shipped stack's Envoy bootstrap, as synth writes it, passes the real `envoy --mode validate`."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from components.k8s import naming
from components.k8s.gateway.envoy.config import bootstrap, render
from infra import fidelity
from infra.config import parse
from infra.writers.envoy import ENVOY_CONFIG_PATH
from tests.artifacts.test_envoy_variants_live import RAW as VARIANTS_RAW
from tests.support.fake_backends import ENVOY
from tests.support.stacks import SHIPPED_STACKS, stack_config

STACKS = SHIPPED_STACKS




def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ENVOY), "--mode", "validate", "-c", str(path), "--use-dynamic-base-id",
                           "-l", "warning"], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("stack", STACKS)
def test_written_config_passes_envoy_validate(stack: str, synthesized: Callable[[str], Path]) -> None:
    cfg = stack_config(stack)
    written = synthesized(stack) / ENVOY_CONFIG_PATH  # write_envoy copies the program's ConfigMap there
    res = validate(written)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Deprecated field" not in res.stderr
    assert f"configuration '{written}' OK" in res.stdout
    # the program builds the gateway from the config the fidelity gate leaves (variants without a pass held back)
    routed = fidelity.routable(cfg, fidelity.load_verdicts(cfg, fidelity.default_stacks_dir()))
    assert yaml.safe_load(written.read_text()) == bootstrap(routed)


def test_envoy_validate_rejects_a_broken_config(tmp_path: Path) -> None:
    """The check above has teeth: one unknown field fails validation."""
    text = render(stack_config("dev")).replace("dns_lookup_family: V4_ONLY", "dns_lookup_family: V4_ONLYS")
    (tmp_path / "bad.yaml").write_text(text)
    res = validate(tmp_path / "bad.yaml")
    assert res.returncode == 1 and "V4_ONLYS" in res.stderr


def test_render_is_deterministic_and_binds_admin_to_loopback() -> None:
    cfg = stack_config("prod")
    assert render(cfg) == render(stack_config("prod"))
    doc = bootstrap(cfg)
    assert doc["admin"]["address"]["socket_address"] == {"address": "127.0.0.1",
                                                         "port_value": naming.ENVOY_ADMIN_PORT}


def test_a_config_with_variants_passes_envoy_validate(tmp_path: Path) -> None:
    """Variant decision routes (range and RE2 header matchers, stat_prefix, header formatters), aggregate
    clusters and retry priorities: every field as Envoy 1.40 knows it, none deprecated."""
    doc = bootstrap(parse(VARIANTS_RAW, stack="t"))
    names = [c["name"] for c in doc["static_resources"]["clusters"]]
    assert {"plan__plan-cheap", "plan__plan-fast", "quick__quick-fast"} <= set(names)
    (tmp_path / "variants.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    res = validate(tmp_path / "variants.yaml")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Deprecated field" not in res.stderr
