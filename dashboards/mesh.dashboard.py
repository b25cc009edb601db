"""grafanalib `generate-dashboards` entry: the mesh dashboard of stack $AIFACTORY_STACK (default: dev).

    AIFACTORY_STACK=prod generate-dashboard -o build/mesh.json dashboards/mesh.dashboard.py
"""

from infra.dashboard_scripts import stack_board

dashboard = stack_board("mesh")
