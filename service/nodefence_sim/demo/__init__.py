"""``nodefence demo``: the seed runbook's story, played by the product against the simulated
cluster. It ships with the simulator (the ``nodefence-sim`` distribution), so the product's own
distribution carries nothing that needs the simulator."""
