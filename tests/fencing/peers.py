"""Real BMC peers for the driver tests: sushy-emulator (the OpenStack Redfish emulator) and an
IPMI BMC on pyghmi's server side, each in its own process on a free loopback port, plus
throwaway certificate authorities."""

from __future__ import annotations

import datetime
import importlib.util
import ipaddress
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import bcrypt
from bench.processes import free_port
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

STARTUP_SECONDS = 30.0
USER = "fencer"
PASSWORD = "correct-horse-battery"
IPMI_BMC_SCRIPT = Path(__file__).with_name("ipmi_bmc.py")


def sushy_installed() -> bool:
    return importlib.util.find_spec("sushy_tools") is not None


@dataclass(frozen=True)
class Ca:
    cert_file: Path
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_ca(directory: Path, label: str) -> Ca:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"{label} test CA"))
        .issuer_name(_name(f"{label} test CA"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{label}-ca.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Ca(path, key, cert)


def issue_server_cert(directory: Path, ca: Ca, label: str) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost signed by ``ca``: (cert file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.OID_SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    cert_file = directory / f"{label}.pem"
    key_file = directory / f"{label}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


class Process:
    """A peer subprocess whose output goes to a file (read when it fails to start)."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.log = log
        self._handle = log.open("w")
        self.process = subprocess.Popen(command, stdout=self._handle, stderr=subprocess.STDOUT)

    def output(self) -> str:
        if not self._handle.closed:
            self._handle.flush()
        return self.log.read_text(errors="replace")[-4000:]

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._handle.close()


@dataclass
class Sushy:
    url: str
    process: Process
    ca_file: Path


def start_sushy(directory: Path, systems: list[dict[str, object]], ca: Ca) -> Sushy:
    """sushy-emulator with its fake driver, basic auth (bcrypt htpasswd) and TLS from ``ca``."""
    port = free_port()
    cert_file, key_file = issue_server_cert(directory, ca, "sushy")
    htpasswd = directory / "htpasswd"
    digest = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    htpasswd.write_text(f"{USER}:{digest}\n")
    state = directory / "sushy-state"
    state.mkdir()
    config = directory / "sushy.conf"
    config.write_text(
        "\n".join(
            [
                "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'",
                f"SUSHY_EMULATOR_LISTEN_PORT = {port}",
                "SUSHY_EMULATOR_FAKE_DRIVER = True",
                f"SUSHY_EMULATOR_FAKE_SYSTEMS = {systems!r}",
                f"SUSHY_EMULATOR_STATE_DIR = {str(state)!r}",
                f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}",
                f"SUSHY_EMULATOR_SSL_CERT = {str(cert_file)!r}",
                f"SUSHY_EMULATOR_SSL_KEY = {str(key_file)!r}",
                "",
            ]
        )
    )
    process = Process(
        [sys.executable, "-m", "sushy_tools.emulator.main", "--config", str(config)],
        directory / "sushy.log",
    )
    url = f"https://127.0.0.1:{port}"
    context = ssl.create_default_context(cafile=str(ca.cert_file))
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        try:
            # An https URL built right here: no user-supplied scheme to audit.
            probe = f"{url}/redfish/v1"
            with urllib.request.urlopen(probe, context=context, timeout=2) as r:  # noqa: S310
                if r.status == 200:
                    return Sushy(url, process, ca.cert_file)
        except (urllib.error.URLError, OSError):
            pass
        if not process.alive() or time.monotonic() > deadline:
            output = process.output()
            process.stop()
            raise RuntimeError(f"sushy-emulator did not start:\n{output}")
        time.sleep(0.1)


@dataclass
class IpmiBmc:
    port: int
    process: Process


def start_ipmi_bmc(
    directory: Path,
    *,
    power: str = "on",
    off_delay: float = 0.0,
    password: str = PASSWORD,
    guid: str | None = None,
) -> IpmiBmc:
    """A pyghmi BMC on a loopback UDP port; ``off_delay`` seconds between a power-off request
    and the machine reading off; ``guid``, the system GUID it reports."""
    port = free_port(socket.SOCK_DGRAM)
    process = Process(
        [
            sys.executable,
            str(IPMI_BMC_SCRIPT),
            str(port),
            USER,
            password,
            power,
            str(off_delay),
            *([guid] if guid is not None else []),
        ],
        directory / f"ipmi-{port}.log",
    )
    deadline = time.monotonic() + STARTUP_SECONDS
    while "ready" not in process.output():
        if not process.alive() or time.monotonic() > deadline:
            output = process.output()
            process.stop()
            raise RuntimeError(f"IPMI BMC did not start:\n{output}")
        time.sleep(0.05)
    return IpmiBmc(port, process)
