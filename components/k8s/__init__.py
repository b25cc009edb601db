"""components/k8s"""
