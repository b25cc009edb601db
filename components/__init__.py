"""Pulumi ComponentResources: aws/ (network, EKS, GPU node pools, EFA) and k8s/ (platform on Kubernetes)."""
