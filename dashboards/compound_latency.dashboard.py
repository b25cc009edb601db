"""grafanalib `generate-dashboards` entry: the compound-latency dashboard of stack $AIFACTORY_STACK (default: dev).

    AIFACTORY_STACK=prod generate-dashboard -o build/compound_latency.json dashboards/compound_latency.dashboard.py
"""

from infra.dashboard_scripts import stack_board

dashboard = stack_board("compound-latency")
