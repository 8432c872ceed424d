"""``nodefence demo``: the seed runbook's story, played on the embedded simulated cluster."""
