"""What EC2 accepts for a gp3 volume the EBS CSI driver creates from a StorageClass and a claim's size.

Part of the shared vocabulary (imports nothing of the kit): the storage classes (components/k8s/storage.py) are
sized by it, and the policy pack's `volume-fits-class` rule (policies/preflight/volumes.py) checks every claim with it.

EBS user guide, "General Purpose SSD volumes" (gp3): 3,000 IOPS and 125 MiB/s baseline at any size; provisioned IOPS
up to 500 per GiB, throughput up to 0.25 MiB/s per provisioned IOPS. The EBS CSI driver passes a class's `iops` to
CreateVolume and lowers it to 500 x size only where that is still at least gp3's 3,000 minimum (6 GiB and more);
`throughput` it passes unchanged (kubernetes-sigs/aws-ebs-csi-driver pkg/cloud/cloud.go `capIOPS`). So a class with
iops 4000 and throughput 1000 fits claims of 8 GiB and more: at 1 to 5 GiB EC2 refuses the IOPS, at 6 or 7 GiB the
driver lowers the IOPS below what 1,000 MiB/s needs and EC2 refuses the throughput.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["GP3_BASELINE_IOPS", "GP3_BASELINE_MIBPS", "GP3_MAX_IOPS_PER_GIB", "GP3_MIBPS_PER_IOPS",
           "gp3_min_size_gib", "gp3_refusal"]

GP3_BASELINE_IOPS = 3000
GP3_BASELINE_MIBPS = 125
GP3_MAX_IOPS_PER_GIB = 500
GP3_MIBPS_PER_IOPS = 0.25


def _iops_for(size_gib: int, iops: int | None) -> int:
    """The IOPS the driver asks EC2 for: the class's, lowered to 500 per GiB where that stays at 3,000 or more."""
    if iops is None:
        return GP3_BASELINE_IOPS
    cap = GP3_MAX_IOPS_PER_GIB * size_gib
    return cap if iops > cap >= GP3_BASELINE_IOPS else iops


def gp3_refusal(size_gib: int, parameters: Mapping[str, str]) -> str | None:
    """Why EC2 refuses CreateVolume for a claim of `size_gib` on a gp3 class with these parameters, or None."""
    if str(parameters.get("type", "")).lower() != "gp3":
        return None
    iops = int(parameters["iops"]) if parameters.get("iops") else None
    asked = _iops_for(size_gib, iops)
    if asked > max(GP3_BASELINE_IOPS, GP3_MAX_IOPS_PER_GIB * size_gib):  # the baseline comes with any size
        return (f"EC2 refuses {asked} IOPS on {size_gib} GiB: gp3 allows at most {GP3_MAX_IOPS_PER_GIB} IOPS per GiB "
                f"({GP3_MAX_IOPS_PER_GIB * size_gib})")
    throughput = int(parameters["throughput"]) if parameters.get("throughput") else None
    if throughput is not None and throughput > asked * GP3_MIBPS_PER_IOPS:
        return (f"EC2 refuses {throughput} MiB/s with {asked} IOPS on {size_gib} GiB: gp3 allows at most "
                f"{GP3_MIBPS_PER_IOPS:g} MiB/s per IOPS ({asked * GP3_MIBPS_PER_IOPS:g})")
    return None


def gp3_min_size_gib(parameters: Mapping[str, str]) -> int:
    """The smallest claim (GiB) a gp3 class fits."""
    iops = int(parameters["iops"]) if parameters.get("iops") else 0
    throughput = int(parameters["throughput"]) if parameters.get("throughput") else 0
    needed = max(iops, math.ceil(throughput / GP3_MIBPS_PER_IOPS))
    return max(1, math.ceil(needed / GP3_MAX_IOPS_PER_GIB)) if needed > GP3_BASELINE_IOPS else 1
