"""Pieces the demo, the tests and the benchmarks share: Alertmanager payloads, a receiver served
in-process, a view of the cluster and the timeline. None of them needs the simulator; the story
itself (``nodefence demo``) lives with it, in ``nodefence_sim.demo``."""
