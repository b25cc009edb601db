"""grafanalib `generate-dashboards` entry: the gpu-fleet dashboard of stack $AIFACTORY_STACK (default: dev).

    AIFACTORY_STACK=prod generate-dashboard -o build/gpu_fleet.json dashboards/gpu_fleet.dashboard.py
"""

from infra.dashboard_scripts import stack_board

dashboard = stack_board("gpu-fleet")
