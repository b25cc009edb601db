"""Two token issuers in front of the real Envoy: each may only name the tenants it is given (`issuers[].tenants`).

Without the restriction any configured issuer could mint a token for any tenant: a second team's IdP, trusted for
its own tenant, could call every other tenant's models. jwt_authn alone proves who signed a token, not which
tenants that signer speaks for (Envoy JwtProvider: claims are copied, never checked against the issuer).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest

from infra.config import parse
from tests.support.envoy import start_gateway
from tests.support.fake_backends import Behaviour, EnvoyProcess, FakeBackend, request
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer

TEAM_IDP = "https://idp.alpha.test"  # may name only tenant alpha
CORP_IDP = "https://sso.corp.test"  # tenants unset: may name any tenant
_MODEL = {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "pool": "gpu"}
RAW = {
    "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
    "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
    "tenants": {"alpha": {"gpuQuota": 1}, "beta": {"gpuQuota": 1}},
    "models": {"alpha-chat": {**_MODEL, "tenant": "alpha"}, "beta-chat": {**_MODEL, "tenant": "beta"}},
    "gateway": {"auth": {"issuers": [
        {"issuer": TEAM_IDP, "jwksUri": f"{TEAM_IDP}/certs", "audiences": [DEFAULT_AUDIENCE], "tenants": ["alpha"]},
        {"issuer": CORP_IDP, "jwksUri": f"{CORP_IDP}/certs", "audiences": [DEFAULT_AUDIENCE]}]}},
    "observability": {"prices": {"dgx-h100": 30.0}},
}


@dataclass
class Gateway:
    port: int
    envoy: EnvoyProcess
    team: Issuer
    corp: Issuer
    backends: dict[str, FakeBackend]

    def call(self, signer: Issuer, tenant: str | None, model: str, **claims: object) -> int:
        status, _ = request(self.port, "/v1/chat/completions",
                            {**signer.bearer(tenant, **claims), "x-model": model, "content-type": "application/json"},
                            body=json.dumps({"model": model, "messages": []}).encode())
        return status


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    cfg = parse(RAW, stack="issuers")
    team, corp = Issuer(TEAM_IDP), Issuer(CORP_IDP)
    with ExitStack() as stack:
        backends = {m: stack.enter_context(FakeBackend(m, Behaviour.OK)) for m in RAW["models"]}
        envoy = start_gateway(stack, cfg, tmp_path_factory.mktemp("envoy"), jwks=[team.jwks, corp.jwks],
                              endpoints={m: [b.address] for m, b in backends.items()})
        yield Gateway(envoy.listener_port, envoy, team, corp, backends)


def test_an_issuer_names_its_own_tenant(gateway: Gateway) -> None:
    assert gateway.call(gateway.team, "alpha", "alpha-chat") == 200


def test_an_issuer_cannot_mint_a_token_for_another_tenant(gateway: Gateway) -> None:
    before = gateway.backends["beta-chat"].hits
    assert gateway.call(gateway.team, "beta", "beta-chat") == 403
    assert gateway.call(gateway.team, "beta", "alpha-chat") == 403, "not even for a model beta may not call"
    assert gateway.backends["beta-chat"].hits == before


def test_a_token_without_the_tenant_claim_is_refused(gateway: Gateway) -> None:
    assert gateway.call(gateway.team, None, "alpha-chat") == 403


def test_an_unrestricted_issuer_names_any_tenant(gateway: Gateway) -> None:
    assert gateway.call(gateway.corp, "beta", "beta-chat") == 200
    assert gateway.call(gateway.corp, "alpha", "alpha-chat") == 200


def test_a_token_claiming_the_other_issuer_is_checked_against_the_signer(gateway: Gateway) -> None:
    # iss says the corporate IdP (unrestricted) but the team IdP's key signed it: jwt_authn refuses it (401)
    assert gateway.call(gateway.team, "beta", "beta-chat", issuer=CORP_IDP) == 401


def _denied(gateway: Gateway) -> int:
    _, text = request(gateway.envoy.admin_port, "/stats?filter=rbac.issuer_tenants.denied$")
    name, _, value = text.decode().strip().partition(": ")
    assert name == "http.gateway.rbac.issuer_tenants.denied", text
    return int(value)


def test_refusals_are_counted_and_the_config_has_no_deprecated_field(gateway: Gateway) -> None:
    before = _denied(gateway)
    assert gateway.call(gateway.team, "beta", "beta-chat") == 403
    assert gateway.call(gateway.corp, "beta", "beta-chat") == 200
    assert _denied(gateway) == before + 1
    warnings = [x for x in gateway.envoy.error_log.read_text().splitlines() if "[warning]" in x]
    assert [w for w in warnings if "deprecat" in w.lower() or "will be ignored" in w] == []
