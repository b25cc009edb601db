"""Rule volume-fits-class: every claim's size fits what its StorageClass provisions, as EC2 would judge the volume.

A claim on an EBS CSI gp3 class is created with the class's `iops` and `throughput` (the driver lowers IOPS only
where 500 per GiB stays at gp3's 3,000 minimum): a 1 GiB claim on a 4,000-IOPS class is refused by CreateVolume, the
claim stays Pending and its pod (Alertmanager: no alert is ever delivered) never starts. The limits and their sources
are in components/volumes.py. A claim without storageClassName is judged by the default class; a class the state does
not hold, or a claim whose size the state does not say (a chart's default), is not judged."""

from __future__ import annotations

import math
from collections.abc import Sequence

from components.volumes import gp3_refusal
from policies.preflight.resources import Finding, Res, get_path, parse_quantity
from policies.preflight.storage import DEFAULT_CLASS_ANNOTATION, claims

__all__ = ["EBS_CSI_PROVISIONER", "volume_fit_findings"]

EBS_CSI_PROVISIONER = "ebs.csi.aws.com"
GIB = 2**30


def volume_fit_findings(resources: Sequence[Res]) -> list[Finding]:
    classes = {r.name: r for r in resources if r.kind == "StorageClass" and r.group == "storage.k8s.io"}
    default = next((n for n, r in sorted(classes.items()) if str(get_path(
        r.props, "metadata", "annotations", DEFAULT_CLASS_ANNOTATION, default="")) == "true"), None)
    out = []
    for c in claims(resources):
        name = default if c.storage_class is None else c.storage_class
        sc = classes.get(name) if name else None
        if sc is None or c.size is None or sc.props.get("provisioner") != EBS_CSI_PROVISIONER:
            continue
        try:
            size_gib = max(1, math.ceil(parse_quantity(c.size) / GIB))  # the driver rounds up to whole GiB
        except ValueError:
            continue
        params = {k: str(v) for k, v in (sc.props.get("parameters") or {}).items()}
        if (refusal := gp3_refusal(size_gib, params)) is not None:
            out.append(Finding("volume-fits-class", c.res.label,
                               f"{c.where}: a {c.size} claim on StorageClass {name!r} (iops {params.get('iops', '-')}, "
                               f"throughput {params.get('throughput', '-')}): {refusal}; the claim stays Pending",
                               "Name a class without provisioned IOPS for claims under the class's minimum, or make "
                               "the claim larger.", c.res.urn))
    return out
