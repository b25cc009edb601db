"""README.md, CONTRIBUTING.md and docs/ hold together: every relative link resolves (file and heading), README
stays short, and every code block in a language the tests can read parses (the examples that run are run by
tests/unit/test_readme.py and tests/unit/test_telemetry_readme.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
# Written by the stack model's generator (issue 30, item 1) from the model's field descriptions; a link to it is
# checked against the file once the file is there.
GENERATED = {ROOT / "docs" / "stack-reference.md"}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.S | re.M)


def prose(text: str) -> str:
    """The text outside code blocks (links and headings inside a fence are not Markdown)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", prose(page.read_text()), flags=re.M)}


def links(page: Path) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", prose(page.read_text()))  # a code span's brackets are not a link
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_and_heading(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if dest in GENERATED and not dest.exists():
            continue
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert broken == []


def test_the_link_checker_finds_a_broken_file_and_a_broken_heading(tmp_path: Path) -> None:
    assert slug("After every `pulumi up`: `aifactory verify`") == "after-every-pulumi-up-aifactory-verify"
    assert slug("Deadline-aware routing (`bench_variant_routing.py`)") == (
        "deadline-aware-routing-bench_variant_routingpy")
    page = tmp_path / "p.md"
    page.write_text("# Top\n\n[a](p.md#top) [b](missing.md) [c](#nowhere) [d](https://x.example)\n```\n[e](no.md)\n```\n")
    assert links(page) == ["p.md#top", "missing.md", "#nowhere"]
    assert anchors(page) == {"top"}


def test_readme_is_short_and_docs_has_an_index_of_every_page() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
    index = (ROOT / "docs" / "README.md").read_text()
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"} | {p.name for p in GENERATED}
    assert {t for t in links(ROOT / "docs" / "README.md") if not t.startswith("../")} == pages
    assert "(../CONTRIBUTING.md)" in index


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_parse(page: Path) -> None:
    """python compiles, yaml loads, json is JSON Lines: an example that no longer parses is caught here even where
    no test runs it."""
    for lang, body in FENCE.findall(page.read_text()):
        if lang == "python":
            compile(body, str(page), "exec")
        elif lang == "yaml":
            yaml.safe_load(body)
        elif lang == "json":
            for line in body.splitlines():
                json.loads(line)


def test_the_slow_marks_name_tests_that_exist() -> None:
    """CONTRIBUTING.md's `-m "not slow"` leaves out what tests/conftest.py names: a renamed test must not drop out
    of that list unnoticed."""
    from tests.conftest import SLOW_DIRS, SLOW_TESTS

    assert all((ROOT / d).is_dir() for d in SLOW_DIRS)
    for node in SLOW_TESTS:
        path, _, name = node.partition("::")
        assert f"def {name}(" in (ROOT / path).read_text(), node


def test_the_policies_page_counts_the_packs_policies() -> None:
    """docs/policies.md says how many policies the pack has: the number is the pack's (it had drifted to 39 of 43)."""
    from policies.pack import POLICIES
    text = (ROOT / "docs" / "policies.md").read_text()
    assert f"a CrossGuard policy pack with {len(POLICIES)} policies" in text


@pytest.fixture(scope="module")
def prod_synth() -> dict[str, dict]:
    """prod as `aifactory synth prod` renders it: each registered resource's inputs by name."""
    from infra.synth import read_stack_config, run_program, stack_file

    return {r.name: r.inputs for r in run_program("prod", read_stack_config(stack_file("prod"))).resources}


def test_the_drain_figures_in_the_docs_are_what_prod_renders(prod_synth: dict[str, dict]) -> None:
    """Review round 8: docs/deploying.md still said 985 s where prod renders the gateway's 1165 s grace and
    cluster-autoscaler's --max-graceful-termination-sec 1165. Each figure the pages give for prod's drains is read
    here from what synth renders: the gateway Deployment's grace and preStop (accept, close, bound:
    components.k8s.gateway.drain), deep-research's LeaderWorkerSet graces, the budget service's grace, preStop and
    shutdown grace (round 9), the autoscaler release's flag."""
    from infra.component_args import cluster_autoscaler_args
    from tests.support.stacks import stack_config

    gateway = prod_synth["gateway-deployment"]["spec"]["template"]["spec"]
    grace = gateway["terminationGracePeriodSeconds"]
    *_, accept, close, bound, _poll, _io, _log = gateway["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    lws = prod_synth["model-deep-research-leaderworkerset"]["spec"]["leaderWorkerTemplate"]
    leader, worker = (lws[t]["spec"]["terminationGracePeriodSeconds"] for t in ("leaderTemplate", "workerTemplate"))
    budgets = prod_synth["gateway-budgets-deployment"]["spec"]["template"]["spec"]
    budgets_grace, [budgets_c] = budgets["terminationGracePeriodSeconds"], budgets["containers"]
    budgets_prestop = budgets_c["lifecycle"]["preStop"]["sleep"]["seconds"]
    budgets_shutdown = budgets_c["args"][budgets_c["args"].index("--shutdown-grace-seconds") + 1]
    flag = prod_synth["cluster-autoscaler-release"]["values"]["extraArgs"]["max-graceful-termination-sec"]
    staging_flag = cluster_autoscaler_args(stack_config("staging"))["max_graceful_termination_seconds"]
    longest = max(m.timeout_seconds for m in stack_config("prod").models.values())
    idle = int(accept) + int(close)
    deploying = " ".join((ROOT / "docs" / "deploying.md").read_text().split())
    for figure in (f"prod's longest is the gateway's {grace} s (deep-research's pods: {leader} and {worker} s)",
                   f"never below 600 s (prod {flag}, staging {staging_flag})",
                   f"leaves {accept} + {close} = {idle} s after its eviction",
                   f"(prod: {bound} s, grace {grace} s)", f"up to {longest:g} s",
                   f"workers ({leader} and {worker} s)",
                   f"(grace {budgets_grace} s on prod: a {budgets_prestop} s preStop, then up to "
                   f"`--shutdown-grace-seconds` {budgets_shutdown} for those streams)"):
        assert figure in deploying, figure
    gateway_page = " ".join((ROOT / "docs" / "gateway.md").read_text().split())
    for figure in (f"| {accept} + {close} = {idle} s |", f"is gone about {idle} s after",
                   f"| at most {accept} + {close} + {longest:g} + 10 = {bound} s |", f"| {grace} s | the pod's grace",
                   f"the pod's grace ({grace} s on prod", f"(prod: {accept} + {int(bound) - int(accept)} = {bound} s"):
        assert figure in gateway_page, figure


def test_the_client_pool_defaults_the_gateway_page_gives_are_the_clients_own() -> None:
    """docs/gateway.md, "Calling the gateway: keep-alive pools": a pool that keeps idle connections longer than the
    gateway's 5 s drain may reuse one in Envoy's delayed close and lose a POST. The defaults it names, read from the
    installed clients: httpx's keepalive_expiry (and the openai SDK's limits) 5 s, aiohttp's TCPConnector 15 s,
    requests' adapter no retries; urllib3 keeps no idle limit at all."""
    import asyncio

    import aiohttp
    import httpx
    import requests.adapters
    from openai._constants import DEFAULT_CONNECTION_LIMITS

    from components.k8s.gateway.envoy.config import CLIENT_DRAIN_SECONDS

    async def aiohttp_keepalive() -> float:
        connector = aiohttp.TCPConnector()
        try:
            return float(connector._keepalive_timeout)  # type: ignore[attr-defined]
        finally:
            await connector.close()

    assert httpx.Limits().keepalive_expiry == DEFAULT_CONNECTION_LIMITS.keepalive_expiry == CLIENT_DRAIN_SECONDS
    assert asyncio.run(aiohttp_keepalive()) == 15.0
    assert requests.adapters.DEFAULT_RETRIES == 0
    page = " ".join((ROOT / "docs" / "gateway.md").read_text().split())
    for claim in (f"httpx's default `keepalive_expiry` is {CLIENT_DRAIN_SECONDS} s",
                  "aiohttp 3.14.5 keeps idle connections 15 s", "urllib3 2.8.0 (requests 2.34.2) has no idle limit",
                  "requests retries none by default"):
        assert claim in page, claim
