"""Throwaway certificates for the TLS tests, made at run time with the openssl command line,
and a Secret volume laid out and updated as the kubelet does it."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import socket
import ssl
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl is required to make the test certificates")
    subprocess.run([openssl, *args], check=True, capture_output=True, cwd=cwd)


@dataclass(frozen=True)
class Issued:
    cert_pem: str
    key_pem: str

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the certificate's DER encoding, as a TLS client sees it."""
        return hashlib.sha256(ssl.PEM_cert_to_DER_cert(self.cert_pem)).hexdigest().upper()


class TestCA:
    """A CA and the server certificates it issues for 127.0.0.1, as cert-manager's CA issuer
    would: a renewal is a new key and certificate under the same CA, so a client that trusts
    the CA accepts both."""

    __test__ = False

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.cert = folder / "ca.crt"
        self.key = folder / "ca.key"
        self.serial = 1000
        _openssl(
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=nodefence test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
            "-keyout",
            str(self.key),
            "-out",
            str(self.cert),
            cwd=folder,
        )

    def issue(self, valid: tuple[datetime, datetime] | None = None) -> Issued:
        """A new key and its certificate, valid for a day from now, or from ``valid[0]`` to
        ``valid[1]`` (an expired one, or one not valid yet)."""
        self.serial += 1
        name = f"leaf-{self.serial}"
        extensions = self.folder / f"{name}.ext"
        extensions.write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
            "basicConstraints=CA:FALSE\n"
            "extendedKeyUsage=serverAuth\n"
        )
        _openssl(
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            "/CN=nodefence",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            cwd=self.folder,
        )
        if valid is None:
            _openssl(
                "x509",
                "-req",
                "-in",
                f"{name}.csr",
                "-CA",
                str(self.cert),
                "-CAkey",
                str(self.key),
                "-set_serial",
                str(self.serial),
                "-days",
                "1",
                "-extfile",
                str(extensions),
                "-out",
                f"{name}.crt",
                cwd=self.folder,
            )
        else:
            self._sign_for(name, extensions, *valid)
        return Issued(
            (self.folder / f"{name}.crt").read_text(), (self.folder / f"{name}.key").read_text()
        )

    def _sign_for(
        self, name: str, extensions: Path, not_before: datetime, not_after: datetime
    ) -> None:
        """``openssl ca``, the one command of OpenSSL 3.0 that sets both ends of the validity
        period (``x509 -req`` starts it now)."""
        database = self.folder / f"{name}.db"
        database.mkdir()
        (database / "index.txt").write_text("")
        (database / "serial").write_text(f"{self.serial:04X}\n")
        config = self.folder / f"{name}.cnf"
        config.write_text(
            "[ca]\ndefault_ca = test\n"
            f"[test]\ndatabase = {database / 'index.txt'}\nnew_certs_dir = {database}\n"
            f"serial = {database / 'serial'}\ndefault_md = sha256\npolicy = any\n"
            "unique_subject = no\n"
            "[any]\ncommonName = supplied\n"
        )
        stamp = "%Y%m%d%H%M%SZ"
        _openssl(
            "ca",
            "-batch",
            "-notext",
            "-config",
            str(config),
            "-cert",
            str(self.cert),
            "-keyfile",
            str(self.key),
            "-in",
            f"{name}.csr",
            "-startdate",
            not_before.astimezone(UTC).strftime(stamp),
            "-enddate",
            not_after.astimezone(UTC).strftime(stamp),
            "-extfile",
            str(extensions),
            "-out",
            f"{name}.crt",
            cwd=self.folder,
        )

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert))


class SecretVolume:
    """A kubernetes.io/tls Secret as the kubelet mounts it: ``tls.crt`` -> ``..data/tls.crt``,
    and an update is a new directory and one rename of the ``..data`` symlink, so both files
    change at once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.generation = 0
        root.mkdir(parents=True)

    @property
    def cert(self) -> Path:
        return self.root / "tls.crt"

    @property
    def key(self) -> Path:
        return self.root / "tls.key"

    def publish(self, cert_pem: str, key_pem: str) -> None:
        self.generation += 1
        target = self.root / f"..2026_12_01_{self.generation:04d}"
        target.mkdir()
        (target / "tls.crt").write_text(cert_pem)
        (target / "tls.key").write_text(key_pem)
        swap = self.root / "..data_tmp"
        swap.symlink_to(target.name)
        swap.rename(self.root / "..data")
        for name in ("tls.crt", "tls.key"):
            link = self.root / name
            if not link.is_symlink():
                link.symlink_to(Path("..data") / name)


def served_fingerprint(port: int, context: ssl.SSLContext) -> str:
    """The SHA-256 fingerprint of the certificate a new handshake with 127.0.0.1:port gets,
    verified against ``context``'s CA."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest().upper()


async def served_fingerprint_async(port: int, context: ssl.SSLContext) -> str:
    return await asyncio.to_thread(served_fingerprint, port, context)
