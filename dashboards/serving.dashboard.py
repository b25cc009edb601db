"""grafanalib `generate-dashboards` entry: the serving dashboard of stack $AIFACTORY_STACK (default: dev).

    AIFACTORY_STACK=prod generate-dashboard -o build/serving.json dashboards/serving.dashboard.py
"""

from infra.dashboard_scripts import stack_board

dashboard = stack_board("serving")
