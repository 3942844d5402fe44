"""Deadline-aware capacity on real traces (a script, not a test): ``./dev bench capacity``.

* :mod:`~benchmarks.capacity.traces`: the public Spot traces and their cyclic replay;
* :mod:`~benchmarks.capacity.workload.population`: the seeded mix of deadline jobs;
* :mod:`~benchmarks.capacity.dws`: three models of DWS (FLEX_START) placement;
* :mod:`~benchmarks.capacity.model`: the replay of one job, with the lifecycle's timing;
* :mod:`~benchmarks.capacity.policies`: AUTO (the product's rule) and the baselines;
* :mod:`~benchmarks.capacity.multiregion`: AUTO across the regions a job allows;
* :mod:`~benchmarks.capacity.report`: the tables and issue 23's acceptance lines;
* ``__main__``: the command.
"""
