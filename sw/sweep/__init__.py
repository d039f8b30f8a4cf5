"""Sweeps: many independent ``fdpu run`` points, run in parallel, cached, tabulated.

* :mod:`sw.sweep.grid`: the points of a sweep (a grid of options from the command line or a
  TOML file, or a list), each checked before anything runs;
* :mod:`sw.sweep.cache`: the result cache, keyed by everything that determines a result;
* :mod:`sw.sweep.execute`: running the points, one ``fdpu run`` subprocess each, in this
  process or on a Dask cluster, with a progress bar;
* :mod:`sw.sweep.table`: the combined table (CSV, Markdown);
* :mod:`sw.sweep.paper` and :mod:`sw.sweep.report`: the paper's evaluation as a sweep, and its
  report (Markdown, PNG plots in the style of the paper's Fig. 10 and 11).

The package runs ``fdpu run`` as a program (``python -m sw.cli``) and does not import the
command line; ``fdpu sweep`` and ``fdpu paper`` (:mod:`sw.cli.sweep`, :mod:`sw.cli.paper`) use
it.
"""
