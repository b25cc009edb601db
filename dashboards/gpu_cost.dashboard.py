"""grafanalib `generate-dashboards` entry: the gpu-cost dashboard of stack $AIFACTORY_STACK (default: dev).

    AIFACTORY_STACK=prod generate-dashboard -o build/gpu_cost.json dashboards/gpu_cost.dashboard.py
"""

from infra.dashboard_scripts import stack_board

dashboard = stack_board("gpu-cost")
