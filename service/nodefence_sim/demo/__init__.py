"""``nodefence demo``: the seed runbook's story, played by the product against the simulated
cluster. It ships with the simulator (the ``nodefence-sim`` distribution), so the product's own
distribution carries nothing that needs the simulator. Beside the stories, the pieces the
demo, the tests and the benchmarks share: Alertmanager payloads (``payloads``), a receiver
served in-process (``receiver``), a view of the cluster (``cluster_view``) and the timeline
(``timeline``)."""
