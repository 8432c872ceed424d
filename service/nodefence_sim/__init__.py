"""An in-memory Kubernetes API server with a simulated kubelet and controllers.

There is no real cluster in development or CI, so the product is exercised against this
simulator through the same HTTP API (real ``kubectl`` and kubernetes-asyncio talk to it).
It is a package of its own so that nothing the receiver runs can lean on it: of the product,
only the ``simulate`` and ``demo`` commands load it, and it borrows only the label-selector
parser from the product.
"""
