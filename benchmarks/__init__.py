"""Benchmarks of dcgm-migrate against the simulated cluster at fleet scale (docs/performance.md;
why a benchmark and not a timed test: docs/design.md, "Quality bars").

`python3 -m benchmarks [--sizes 10,100,1000,5000] [--runs N]` starts `sim serve` in its own
process for each size and stack, runs the real CLI (`python -m migrator ...`) and
`kubectl get` against it as subprocesses, and prints a table; `benchmarks/results.json` keeps
the figures. Measurements, never assertions: nothing here fails on a slow machine.

Modules: `stats` and `floor` are pure; `procs` starts and measures processes; `simproc` runs
the simulated cluster and reads its request log; `suite` runs the measurements; `report`
prints the table and judges the targets.
"""
