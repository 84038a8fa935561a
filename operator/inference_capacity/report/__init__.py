"""Render a plan: JSON for machines (CLI ``-o json`` and the CRD status), a text table for
people, and the per-rank stacked-bar chart (seed 000, figure 1).

Three independent modules, one per reader: :mod:`.data` (JSON), :mod:`.text` (tables) and
:mod:`.charts` (matplotlib). Callers import from the package.
"""

from .charts import chart, latency_chart, sweep_chart
from .data import (
    latency_json,
    latency_status,
    ledger_json,
    plan_json,
    recommendation_json,
    sizing_json,
    sizing_status,
    startup_json,
)
from .text import fits_message, sweep_table, table, weights_exceed_gpu, why_not_fits

__all__ = [
    "chart",
    "fits_message",
    "latency_chart",
    "latency_json",
    "latency_status",
    "ledger_json",
    "plan_json",
    "recommendation_json",
    "sizing_json",
    "sizing_status",
    "startup_json",
    "sweep_chart",
    "sweep_table",
    "table",
    "weights_exceed_gpu",
    "why_not_fits",
]
