"""Reports over simulation results.

- :mod:`.published`: what ``vcpulab run`` shows beyond its table: the spec's ``[report]`` and
  ``[[published]]`` settings, published-value comparisons, TLB-latency CDFs (CSV, PNG).
- The HTML report of a results store (``vcpulab report``): :mod:`.data` reads the store,
  :mod:`.figures` draws, :mod:`.sections` makes one :class:`Section` per figure or table,
  :mod:`.page` assembles the page, :mod:`.build` writes it with its CSV files.

``from vcpulab import report; report.parse_info(...)`` keeps working: the names of
:mod:`.published` are re-exported here.
"""

from __future__ import annotations

from .build import Report, ReportError, build_report, csv_dir_for, open_store, write_report
from .page import Section, Table
from .published import (
    CDF_CSV_COLUMNS,
    CDF_QUANTILES,
    CELL_FIELDS,
    CdfSummary,
    Comparison,
    PlanInfo,
    Published,
    cdf_png_path,
    cdf_rows,
    cdf_summary,
    cell_matches,
    compare_published,
    metric_value,
    parse_info,
    quantile,
    series_label,
    shown,
    tlb_samples_ns,
    where_text,
    write_cdf_csv,
    write_cdf_png,
)

__all__ = [
    "Report",
    "ReportError",
    "Section",
    "Table",
    "build_report",
    "csv_dir_for",
    "open_store",
    "write_report",
    "CDF_CSV_COLUMNS",
    "CDF_QUANTILES",
    "CELL_FIELDS",
    "CdfSummary",
    "Comparison",
    "PlanInfo",
    "Published",
    "cdf_png_path",
    "cdf_rows",
    "cdf_summary",
    "cell_matches",
    "compare_published",
    "metric_value",
    "parse_info",
    "quantile",
    "series_label",
    "shown",
    "tlb_samples_ns",
    "where_text",
    "write_cdf_csv",
    "write_cdf_png",
]
