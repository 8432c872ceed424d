"""Proof that a node's machine is powered off (S10): the drivers that reach a machine or read
proof (``fencing.drivers``, one module each), the one table naming them (``fencing.registry``),
the BMC inventory, which machine each entry reaches (``fencing.binding``), ``check-fencing`` and
its background probe."""
