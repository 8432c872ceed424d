"""An IPMI BMC for the tests, on pyghmi's own server side: ``python ipmi_bmc.py PORT USER
PASSWORD on|off OFF_DELAY [GUID]``. The machine reads off ``OFF_DELAY`` seconds after a power-off
request, as real hardware does not stop at once; ``Get System GUID`` answers ``GUID``."""

from __future__ import annotations

import sys
import time
import uuid

from pyghmi.ipmi import bmc  # type: ignore[import-untyped]
from pyghmi.ipmi.private import serversession  # type: ignore[import-untyped]

_open_session = serversession.ServerSession.create_open_session_response


def _sha1_only(self: serversession.ServerSession, request: bytearray) -> bytearray:
    # pyghmi's server side speaks only cipher suite 3 (SHA-1) but answers a SHA-256 proposal as
    # if it had accepted it; a real SHA-1-only BMC refuses (0x11), and the client then falls back.
    if request[12] != 1:
        return bytearray([request[0], 0x11, 0, 0]) + request[4:8]
    return _open_session(self, request)  # type: ignore[no-any-return]


serversession.ServerSession.create_open_session_response = _sha1_only
_rakp1 = serversession.ServerSession._got_rakp1


def _logged_login(self: serversession.ServerSession, data: bytearray) -> None:
    # RAKP 1 opens every login, whether its password then proves right or wrong: the tests count
    # the logins a client makes (a client retrying a refused password locks accounts out). A
    # retransmitted RAKP 1 carries the same client session id; a new login, a new one.
    print(f"login attempt {bytes(self.clientsessionid).hex()}", flush=True)
    _rakp1(self, data)


serversession.ServerSession._got_rakp1 = _logged_login


GUID = "4c4c4544-0042-3510-8044-b4c04f4e3732"


class PoweredBmc(bmc.Bmc):  # type: ignore[misc]
    def __init__(self, user: str, password: str, port: int, power: str, off_delay: float) -> None:
        super().__init__({user: password}, port=port, address="127.0.0.1")
        self.power = power
        self.off_delay = off_delay
        self.off_at: float | None = None
        # The machine's SMBIOS UUID, answered to Get System GUID (a real BMC reads it there).
        self.guid = uuid.UUID(GUID)

    def get_system_guid(self) -> uuid.UUID:
        return self.guid

    def get_power_state(self) -> str:
        if self.off_at is not None and time.monotonic() >= self.off_at:
            self.power, self.off_at = "off", None
        return self.power

    def power_off(self) -> int:
        self.off_at = time.monotonic() + self.off_delay
        print("power off requested", flush=True)
        return 0

    def power_on(self) -> int:
        self.power, self.off_at = "on", None
        print("power on requested", flush=True)
        return 0


if __name__ == "__main__":
    port, user, password, power, off_delay = sys.argv[1:6]
    GUID = sys.argv[6] if len(sys.argv) > 6 else GUID
    server = PoweredBmc(user, password, int(port), power, float(off_delay))
    print("ready", flush=True)
    server.listen()
