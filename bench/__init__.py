"""Benchmarks of nodefence against the manual runbook and against its targets (``make bench``)."""
