"""The aifactory CrossGuard policy pack and its offline runner.

    pack.py          the pack's name and POLICIES (importable; __main__.py constructs the PolicyPack)
    isolation.py     tenants, mesh mTLS, pod privileges, GPUs and taints, exposure, images
    fabric.py        EFA interface layout, security group, zone, placement, device plugin, FI_PROVIDER
    aws_security.py  IMDSv2, EBS, EKS endpoint/secrets/logging, open ingress, S3, IAM wildcards
    base.py          settings (config schema and defaults) and the policy constructors
    preflight.py     admission (quota, Pod Security), CRD order, awaits: what the real system would reject
    kube.py          where pod specs live in workloads and Helm values; images, tolerations
    runner.py        `aifactory policy check` and synth's policy report: the same validate functions
"""
