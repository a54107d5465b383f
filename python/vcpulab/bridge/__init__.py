"""Bridges to real programs on this machine: measuring them (``characterize``, ``mitigate``),
tracing them and replaying their traces in the simulator (``trace``, ``predict``)."""
