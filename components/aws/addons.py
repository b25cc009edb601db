"""The versions of the cluster's EKS add-ons, decided in the program rather than asked of EKS at every run.

EKS moves an add-on's default version (DescribeAddonVersions `defaultVersion`) within a Kubernetes version when it
publishes a new eksbuild, and the add-on's OVERWRITE conflict resolution then applies it at the next unrelated
`pulumi up`. So an add-on runs, in order of preference:

1. the stack's pin, `cluster.addonVersions.<add-on>`;
2. the kit's default for the cluster's Kubernetes version (`DEFAULT_ADDON_VERSIONS`), which moves only when the
   Kubernetes version does (or when the kit's table is updated, a reviewed change);
3. otherwise EKS's default version, asked at every run as before, with a warning that names the key to pin.

The defaults are the versions the Amazon EKS user guide lists as the latest of the Amazon EKS add-on type for each
Kubernetes version, at the commits cited per add-on below (awsdocs/amazon-eks-user-guide). The guide lists no
per-Kubernetes-version table for the EBS CSI driver, and the VPC CNI's stored table stops at Kubernetes 1.33: those
add-ons and versions are not in the table and take path 3 until a version is pinned (the shipped stacks pin every
add-on, and `preflight --aws` checks each pin against eks:DescribeAddonVersions for the stack's version).
"""

from collections.abc import Mapping, Sequence
from typing import NamedTuple

__all__ = [
    "ADDON_VERSION_SOURCES",
    "DEFAULT_ADDON_VERSIONS",
    "AddonVersions",
    "addon_versions",
    "unpinned_warning",
]

# Where each add-on's defaults come from (repository@commit:path of the Amazon EKS user guide).
ADDON_VERSION_SOURCES: dict[str, str] = {
    "vpc-cni": "awsdocs/amazon-eks-user-guide@057948d9301426e6165db5fddb5617a971d08b6c:"
               "latest/ug/networking/managing-vpc-cni.adoc (Amazon VPC CNI versions)",
    "coredns": "awsdocs/amazon-eks-user-guide@057948d9301426e6165db5fddb5617a971d08b6c:"
               "latest/ug/networking/managing-coredns.adoc (CoreDNS versions; 1.34 and 1.35: the same table at "
               "docs.aws.amazon.com/eks/latest/userguide/managing-coredns.html and "
               "docs.amazonaws.cn/en_us/eks/latest/userguide/managing-coredns.md)",
    "kube-proxy": "awsdocs/amazon-eks-user-guide@0cc5a7608f9d1162d052bf2a61eddebc3352139f:"
                  "latest/ug/networking/managing-kube-proxy.adoc (kube-proxy versions; 1.34 and 1.35: the same table "
                  "at docs.aws.amazon.com/eks/latest/userguide/managing-kube-proxy.html and "
                  "docs.amazonaws.cn/zh_cn/eks/latest/userguide/managing-kube-proxy.md)",
}

# Kubernetes version -> add-on -> version (ADDON_VERSION_SOURCES). default: EKS's default version, asked at every
# run, for an add-on or Kubernetes version not listed here.
DEFAULT_ADDON_VERSIONS: dict[str, dict[str, str]] = {
    "1.31": {"vpc-cni": "v1.20.1-eksbuild.3", "coredns": "v1.11.4-eksbuild.22", "kube-proxy": "v1.31.3-eksbuild.2"},
    "1.32": {"vpc-cni": "v1.20.1-eksbuild.3", "coredns": "v1.11.4-eksbuild.22"},
    "1.33": {"vpc-cni": "v1.20.1-eksbuild.3", "coredns": "v1.12.3-eksbuild.1"},
    "1.34": {"coredns": "v1.12.4-eksbuild.1", "kube-proxy": "v1.34.1-eksbuild.2"},
    "1.35": {"coredns": "v1.14.2-eksbuild.4", "kube-proxy": "v1.35.3-eksbuild.2"},
}


class AddonVersions(NamedTuple):
    """The versions decided for a cluster's add-ons, and the add-ons whose version EKS still chooses."""

    versions: dict[str, str]  # add-on -> version: pinned, else the kit's default for the Kubernetes version
    unresolved: tuple[str, ...]  # add-ons (in `addons` order) with neither: EKS's default version, asked at every run


def addon_versions(addons: tuple[str, ...], *, kubernetes_version: str,
                   pinned: Mapping[str, str]) -> AddonVersions:
    """Each of `addons` at its pin, else at the kit's default for `kubernetes_version`; the rest are unresolved."""
    defaults = DEFAULT_ADDON_VERSIONS.get(kubernetes_version, {})
    versions = {a: pinned[a] if a in pinned else defaults[a] for a in addons if a in pinned or a in defaults}
    return AddonVersions(versions, tuple(a for a in addons if a not in versions))


def unpinned_warning(addons: Sequence[str], *, kubernetes_version: str) -> str:
    """What the cluster says, once, about the add-ons whose version EKS still chooses: the keys that pin them, and
    how to list their versions."""
    keys = ", ".join(f"cluster.addonVersions.{a}" for a in addons)
    return (f"cluster.addonVersions: the kit has no default version of {', '.join(addons)} for Kubernetes "
            f"{kubernetes_version}, so EKS's default is asked at every run and a new eksbuild is applied at the next "
            f"`pulumi up`; pin {keys} (aws eks describe-addon-versions --kubernetes-version {kubernetes_version} "
            f"--addon-name <add-on>)")
