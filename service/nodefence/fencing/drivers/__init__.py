"""One module per fencing driver: its client, its inventory entry (how to build the client, the
target's words, the machine keys, how its identity is read), and for a driver that only reads
proof, how it reads it. ``fencing.registry`` names them; nothing else lists them."""
