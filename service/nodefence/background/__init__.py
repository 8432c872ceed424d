"""What a serving receiver runs besides answering requests, every loop named in one place.

``runner.Runner`` starts and stops them together; ``runtime.background_for`` is the one place
that builds it, from the settings: the node index and the pause switch (``kube.informer``
followers), the refresh of the fence gauges and the pause switch (``refresh``), the reconcile
pass (``reconcile``) and the read-only fencing probe (``fencing_probe``). Each periodic one runs
through ``periodic.Periodic``: a round never overlaps the previous one, and the waits are
jittered so that replicas started together drift apart.
"""
