"""The runtime: running planned layers and networks as library calls, below the CLI.

:mod:`sw.runtime.layer` runs one planned layer on the golden model, the performance model or
the RTL and computes its figures; :mod:`sw.runtime.network` runs a network's layers (planned,
split, chained on chip where they can be).  They take objects (plans, weights, the
:class:`~sw.spec.system.System` around the array, :class:`~sw.runtime.layer.RtlOptions`, a
progress :class:`~sw.runtime.layer.Reporter`) and return records; the commands
(:mod:`sw.cli`) map their options to these objects, call, and print.
"""
