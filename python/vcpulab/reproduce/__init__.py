"""``vcpulab reproduce``: the published experiments of ``experiments/published/`` run as a
suite and scored against their published values (docs/reproduce.md).

- :mod:`.suite` finds, checks and loads the suite's files and selects ids;
- :mod:`.run` runs the runnable specs through the normal sweep and results store;
- :mod:`.verdict` computes the per-seed statistics, confidence intervals and verdicts;
- :mod:`.scoreboard` makes the rows and totals (rich table, JSON, Markdown);
- :mod:`.page` writes the HTML scoreboard.
"""

from __future__ import annotations

from .suite import DEFAULT_SUITE, Experiment, Suite, SuiteError, default_suite, load_suite

__all__ = ["DEFAULT_SUITE", "Experiment", "Suite", "SuiteError", "default_suite", "load_suite"]
