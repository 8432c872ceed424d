"""The simulated kubelet and the controllers whose behaviour the seed runbook describes."""
