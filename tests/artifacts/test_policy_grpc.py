"""The pack through its real entry point, started the way the Pulumi CLI starts a Python policy pack.

`pulumi-analyzer-policy-python` (pulumi/pulumi sdk/python/dist) runs, in the pack's directory,
`<virtualenv>/bin/python -u -m pulumi.policy ENGINE_ADDRESS PROGRAM`; pulumi.policy runs the pack's
__main__.py, whose PolicyPack serves the Analyzer gRPC service on 127.0.0.1 and prints its port. The
tests then speak to it as the engine does (pulumi.runtime.proto analyzer_pb2 / analyzer_pb2_grpc).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from policies.pack import PACK_NAME, POLICIES
from tests.support.processes import stop_process

PACK_DIR = Path(__file__).resolve().parents[2] / "policies"
START_TIMEOUT_S = 60
RPC_TIMEOUT_S = 30
STOP_TIMEOUT_S = 10


def _read_port(proc: subprocess.Popen[bytes]) -> int:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
    line = proc.stdout.readline() if ready else b""
    if not line.strip().isdigit():
        proc.kill()
        _, err = proc.communicate(timeout=STOP_TIMEOUT_S)
        raise AssertionError(f"policy pack printed no port within {START_TIMEOUT_S}s: {line!r}\n{err.decode()}")
    return int(line)


@pytest.fixture(scope="module")
def analyzer() -> Iterator[analyzer_pb2_grpc.AnalyzerStub]:
    python = Path(sys.executable)
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTHONHOME", None)
    # The engine address is where the CLI's engine listens; the pack contacts it only to log errors.
    proc = subprocess.Popen([str(python), "-u", "-m", "pulumi.policy", "127.0.0.1:1", "."], cwd=PACK_DIR,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        port = _read_port(proc)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=RPC_TIMEOUT_S)
            yield analyzer_pb2_grpc.AnalyzerStub(channel)
    finally:
        stop_process(proc, STOP_TIMEOUT_S)


def _struct(props: dict) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(props)
    return s


def _diagnostics(response: analyzer_pb2.AnalyzeResponse) -> list[tuple[str, str, int, str]]:
    return sorted((d.policyName, d.message, d.enforcementLevel, d.urn) for d in response.diagnostics)


def test_analyzer_info_lists_every_policy(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty(), timeout=RPC_TIMEOUT_S)
    assert info.name == PACK_NAME and info.supportsConfig
    listed = {p.name: p for p in info.policies}
    assert sorted(listed) == sorted(p.name for p in POLICIES)
    imds = listed["launch-template-imdsv2"]
    assert (imds.enforcementLevel, imds.severity) == (analyzer_pb2.MANDATORY, analyzer_pb2.POLICY_SEVERITY_HIGH)
    assert imds.remediation_steps.startswith("Set metadataOptions.httpTokens: required")
    schema = json_format.MessageToDict(listed["images-from-allowed-registries"].configSchema.properties)
    assert "nvcr.io/nvidia" in schema["allowedRegistries"]["default"]


def test_analyze_reports_a_planted_violation(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    lt = "urn:pulumi:dev::aifactory::aws:ec2/launchTemplate:LaunchTemplate::gpu-lt"
    planted = analyzer_pb2.AnalyzeRequest(type="aws:ec2/launchTemplate:LaunchTemplate", urn=lt, name="gpu-lt",
                                          properties=_struct({"metadataOptions": {"httpTokens": "optional",
                                                                               "httpPutResponseHopLimit": 1}}))
    assert _diagnostics(analyzer.Analyze(planted, timeout=RPC_TIMEOUT_S)) == [
        ("launch-template-imdsv2",
         "Launch templates require IMDSv2 session tokens.\nmetadataOptions.httpTokens is optional; IMDSv1 is reachable",
         analyzer_pb2.MANDATORY, "")]
    fixed = analyzer_pb2.AnalyzeRequest(type=planted.type, urn=lt, name="gpu-lt",
                                        properties=_struct({"metadataOptions": {"httpTokens": "required",
                                                                             "httpPutResponseHopLimit": 1}}))
    assert _diagnostics(analyzer.Analyze(fixed, timeout=RPC_TIMEOUT_S)) == []


def test_analyze_stack_names_the_tenant_namespace(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    ns = "urn:pulumi:dev::aifactory::kubernetes:core/v1:Namespace::team-a"
    resource = analyzer_pb2.AnalyzerResource(type="kubernetes:core/v1:Namespace", urn=ns, name="team-a",
                                             properties=_struct({"metadata": {"name": "team-a"}}))
    response = analyzer.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=[resource]), timeout=RPC_TIMEOUT_S)
    by_policy = {d.policyName: d for d in response.diagnostics}
    assert by_policy["tenant-default-deny"].message.endswith(
        "tenant namespace 'team-a' has no default-deny NetworkPolicy for Egress and Ingress")
    assert by_policy["tenant-default-deny"].urn == ns
    assert by_policy["tenant-allow-nothing"].urn == ns and by_policy["tenant-gpu-quota"].urn == ns


def test_configure_passes_allow_lists_to_the_policies(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    svc = analyzer_pb2.AnalyzeRequest(
        type="kubernetes:core/v1:Service", urn="urn:pulumi:dev::aifactory::kubernetes:core/v1:Service::edge",
        name="edge",
        properties=_struct({"metadata": {"name": "edge", "namespace": "edge"}, "spec": {"type": "NodePort"}}))
    assert [d.policyName for d in analyzer.Analyze(svc, timeout=RPC_TIMEOUT_S).diagnostics] == [
        "external-services-gateway-only"]
    config = analyzer_pb2.PolicyConfig(enforcementLevel=analyzer_pb2.MANDATORY,
                                       properties=_struct({"gatewayNamespaces": ["edge"]}))
    analyzer.Configure(analyzer_pb2.ConfigureAnalyzerRequest(policyConfig={"external-services-gateway-only": config}),
                       timeout=RPC_TIMEOUT_S)
    assert analyzer.Analyze(svc, timeout=RPC_TIMEOUT_S).diagnostics == []
