"""Test support shared by the tests and the benchmarks, kept out of the installed package.

- `advantages_loop`: the per-group Python loop that is the oracle of the advantage tests
  and the peer of benchmarks/bench_advantages.py.
- `synthetic`: run dirs, eval files and datasets with known numbers, for the analysis tests
  and benchmarks/bench_report.py.

Imported as ``tests.support.<module>``: pytest runs from the repo root
(``python -m pytest``), and the benchmarks with ``PYTHONPATH=.``.
"""
