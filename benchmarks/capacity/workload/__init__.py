"""The jobs the capacity benchmark replays (:mod:`benchmarks.capacity.workload.population`)."""
