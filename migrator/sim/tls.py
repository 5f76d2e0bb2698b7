"""TLS for the sim's second listener, so kubectl sends credentials.

client-go attaches a kubeconfig's token, client certificate and impersonation settings only
when the server URL is `https` (`tools/clientcmd/client_config.go`: "only try to read the auth
information if we are secure", `isConfigTransportTLS`). Over the sim's plain-HTTP port kubectl
therefore always arrives without a token; over this listener it runs as the kubeconfig's
identity, and `--as`/`--as-group` impersonation headers reach the server.

The certificate is self-signed for 127.0.0.1/localhost, made with the `openssl` command (no
Python crypto dependency) in the caller's directory; kubeconfigs carry it as
`certificate-authority-data`, so clients verify the server as they would a real cluster's.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


class TLSUnavailable(RuntimeError):
    """The certificate cannot be made (no `openssl` on PATH, or it failed)."""


@dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path

    @property
    def pem(self) -> bytes:
        """The certificate (also its own CA) as PEM, for `certificate-authority-data`."""
        return self.cert.read_bytes()

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        return context


def make_certificate(directory: Path) -> Certificate:
    """A fresh self-signed P-256 certificate for 127.0.0.1 and localhost, valid ten years."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise TLSUnavailable("the `openssl` command is needed for the sim's TLS listener")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "sim-tls.crt", directory / "sim-tls.key"
    result = subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "3650",
         "-subj", "/CN=dcgm-migrate-sim",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        capture_output=True, text=True, check=False, timeout=30)
    if result.returncode != 0:
        raise TLSUnavailable(f"openssl could not make the sim's certificate: "
                             f"{result.stderr.strip()}")
    key.chmod(0o600)
    return Certificate(cert, key)
