"""The pack's identity and its policies, importable without starting anything (PolicyPack blocks)."""

from __future__ import annotations

from pulumi_policy import Policy

from policies import aws_security, fabric, fidelity, isolation, preflight, scrape

__all__ = ["PACK_NAME", "PACK_DESCRIPTION", "POLICIES", "by_name"]

PACK_NAME = "aifactory"
PACK_DESCRIPTION = ("Tenant isolation, data-plane fabric correctness, AWS security and admission/await preflight "
                    "for aifactory GPU clusters.")
POLICIES: list[Policy] = [*isolation.POLICIES, *fabric.POLICIES, *aws_security.POLICIES, *preflight.POLICIES,
                         *fidelity.POLICIES, *scrape.POLICIES]


def by_name() -> dict[str, Policy]:
    return {p.name: p for p in POLICIES}


if len(by_name()) != len(POLICIES):  # a duplicate name would make CrossGuard config ambiguous
    raise RuntimeError("two policies of the pack share a name")
