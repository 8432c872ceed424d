"""An in-memory Kubernetes API server with a simulated kubelet and controllers.

There is no real cluster in development or CI, so the product is exercised against this
simulator through the same HTTP API (real ``kubectl`` and kubernetes-asyncio talk to it).
"""
