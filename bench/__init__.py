"""Benchmarks, run by hand (`make bench`); results are recorded in BENCHMARKS.md.

Every benchmark runs on its own embedded PostgreSQL (never instance/), reports the median of
several runs and a ratio to a baseline measured in the same run.
"""
