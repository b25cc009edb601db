"""The EKS Kubernetes version calendar: when each version leaves standard and extended support.

One table (EKS_SUPPORT_CALENDAR) read by `aifactory validate` (a warning within SUPPORT_WARNING_DAYS of the end of
standard support) and by `preflight --aws` (which asks the account's own calendar, eks:DescribeClusterVersions, and
compares). Dates are UTC days from the Amazon EKS user guide's release calendar ("Understand the Kubernetes version
lifecycle on EKS", #kubernetes-release-calendar): awsdocs/amazon-eks-user-guide@8596db85c9ea47d3c692d8c7c0498f616187d44d
:latest/ug/versioning/kubernetes-versions.adoc for 1.27 to 1.33; 1.34 and 1.35 from the same calendar as published at
docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html (mirrored by endoflife.date/amazon-eks: 1.34 ends
2026-12-02, 1.35 ends 2027-03-27). Standard support lasts 14 months from the EKS release, extended support 12 more.

With `upgradePolicy.supportType: STANDARD` EKS upgrades the control plane itself when standard support ends; a stack
that still names the old version then asks for a downgrade, which EKS refuses. A light module: config validation
imports it without pulling in pulumi_aws.
"""

from __future__ import annotations

import datetime
from typing import NamedTuple

__all__ = ["SupportWindow", "EKS_SUPPORT_CALENDAR", "CALENDAR_SOURCE", "SUPPORT_WARNING_DAYS", "support_warning"]

CALENDAR_SOURCE = ("Amazon EKS user guide, Kubernetes release calendar "
                   "(docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html#kubernetes-release-calendar)")
SUPPORT_WARNING_DAYS = 60  # EKS announces an end of standard support at least 60 days ahead (same page, FAQ)


class SupportWindow(NamedTuple):
    """One Kubernetes minor version on EKS: the days its standard and extended support end (UTC)."""

    end_of_standard: datetime.date
    end_of_extended: datetime.date


_d = datetime.date
EKS_SUPPORT_CALENDAR: dict[str, SupportWindow] = {
    "1.31": SupportWindow(_d(2025, 11, 26), _d(2026, 11, 26)),
    "1.32": SupportWindow(_d(2026, 3, 23), _d(2027, 3, 23)),
    "1.33": SupportWindow(_d(2026, 7, 29), _d(2027, 7, 29)),
    "1.34": SupportWindow(_d(2026, 12, 2), _d(2027, 12, 2)),
    "1.35": SupportWindow(_d(2027, 3, 27), _d(2028, 3, 27)),
}


def support_warning(version: str, *, today: datetime.date, key: str = "kubernetesVersion",
                    support_type: str = "STANDARD") -> str | None:
    """What to tell the user about `version` on `today`: past or within SUPPORT_WARNING_DAYS of its end of standard
    support (with the date and what EKS then does), or not in the calendar; None when it is comfortably supported."""
    window = EKS_SUPPORT_CALENDAR.get(version)
    if window is None:
        return (f"{key}: {version!r} is not in the kit's EKS support calendar (components/aws/versions.py); check its "
                f"end of standard support with `aws eks describe-cluster-versions --cluster-versions {version}`")
    end = window.end_of_standard
    then = ("EKS upgrades the control plane itself and the next `pulumi up` asks for a downgrade it refuses"
            if support_type == "STANDARD" else "the cluster is billed for extended support")
    upgrade = "raise it one minor version at a time (docs/deploying.md, \"Upgrading Kubernetes\")"
    if today >= end:
        return f"{key}: {version} left EKS standard support on {end.isoformat()}: {then}; {upgrade}"
    days = (end - today).days
    if days <= SUPPORT_WARNING_DAYS:
        return (f"{key}: {version} leaves EKS standard support on {end.isoformat()} (in {days} days): then {then}; "
                f"{upgrade}")
    return None
