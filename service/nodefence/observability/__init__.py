"""Structured logs and Prometheus metrics for the receiver."""
