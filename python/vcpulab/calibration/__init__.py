"""Calibration and sensitivity (docs/calibration.md): published rows as functions of a testbed's
estimated costs.

- :mod:`.rows` names rows (``ID:N``), reads a preset's estimates and bounds, and evaluates rows
  with parameter values through the suite's results store;
- :mod:`.sensitivity` is ``vcpulab sensitivity``: elasticities, tornado data, what it would take;
- :mod:`.fit` is ``vcpulab calibrate``: the bounded fit of a testbed's estimates to its
  calibration rows.
"""
