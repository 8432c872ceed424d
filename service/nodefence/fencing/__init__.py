"""Proof that a node's machine is powered off (S10): the drivers that reach a machine or read
proof (``fencing.drivers``, one module each, named by the table in ``engine.drivers``), the
agreement between a rule's driver and a node's inventory entry (``fencing.registry``), the BMC
inventory, which machine each entry reaches (``fencing.binding``), and ``check-fencing`` with the
record of its background probe."""
