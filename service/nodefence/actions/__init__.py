"""Carrying out the engine's actions on the cluster, each re-checking its precondition."""
