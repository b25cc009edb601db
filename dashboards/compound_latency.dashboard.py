"""grafanalib `generate-dashboards` entry: the compound-latency dashboard of stack $AIFACTORY_STACK (default: dev).

    AIFACTORY_STACK=prod generate-dashboards dashboards/compound_latency.dashboard.py
"""

import os

import dashboards

dashboard = dashboards.build(dashboards.load_stack(os.environ.get("AIFACTORY_STACK", "dev")))["compound-latency"]
