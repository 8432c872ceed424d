"""A TLS front for the simulator's Redfish BMCs, for the demo's fence_redfish, which speaks only
HTTPS: a throwaway self-signed certificate for 127.0.0.1 and a byte pipe to the plain-HTTP
simulator. The demo's inventory turns certificate checks off for it (``ssl_insecure``), as an
operator would only for a BMC whose certificate nobody vouches for."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

CHUNK = 65536


def _self_signed(directory: Path) -> tuple[Path, Path]:
    # cryptography comes with pyghmi, the IPMI driver's dependency.
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nodefence demo BMC")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "bmc.pem", directory / "bmc.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


@contextlib.asynccontextmanager
async def tls_front(target_port: int) -> AsyncIterator[int]:
    """Listens with TLS on a free loopback port (yielded) and passes each connection to
    ``127.0.0.1:target_port``."""
    with tempfile.TemporaryDirectory(prefix="nodefence-demo-tls-") as directory:
        cert_file, key_file = _self_signed(Path(directory))
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert_file, key_file)

        async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
            try:
                server_r, server_w = await asyncio.open_connection("127.0.0.1", target_port)
            except OSError:
                client_w.close()
                return
            await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
        try:
            yield int(server.sockets[0].getsockname()[1])
        finally:
            server.close()
            await server.wait_closed()
