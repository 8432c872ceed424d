"""Proof that a machine is powered off, from its BMC (Redfish or IPMI), for the fence guard."""

from nodefence.fencing.inventory import Inventory, InventoryError, load_inventory
from nodefence.fencing.model import PowerDriver, PowerReading

__all__ = ["Inventory", "InventoryError", "PowerDriver", "PowerReading", "load_inventory"]
