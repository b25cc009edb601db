"""grafanalib `generate-dashboards` entry: the serving dashboard of stack $AIFACTORY_STACK (default: dev).

    AIFACTORY_STACK=prod generate-dashboards dashboards/serving.dashboard.py
"""

import os

import dashboards

dashboard = dashboards.build(dashboards.load_stack(os.environ.get("AIFACTORY_STACK", "dev")))["serving"]
