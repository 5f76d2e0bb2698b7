"""TLS for the sim's second listener, so kubectl sends credentials.

client-go attaches a kubeconfig's token, client certificate and impersonation settings only
when the server URL is `https` (`tools/clientcmd/client_config.go`: "only try to read the auth
information if we are secure", `isConfigTransportTLS`). Over the sim's plain-HTTP port kubectl
therefore always arrives without a token; over this listener it runs as the kubeconfig's
identity, and `--as`/`--as-group` impersonation headers reach the server.

The certificate is self-signed for 127.0.0.1/localhost and, as a real API server's serving
certificate, for the `kubernetes` Service (its first cluster IP in each family's service range,
10.96.0.1 and fd00:10:96::1, and its DNS names), where pods run by the sim's container runtime
reach it (runtime/relay.py). It is made in the caller's directory with the
`cryptography` package when it is installed (the `test` extra brings it), else with the
`openssl` command, so neither is a hard dependency of the tool; kubeconfigs carry it as
`certificate-authority-data`, so clients verify the server as they would a real cluster's.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dcgm_sim.network import SERVICE_CIDRS

SUBJECT = "dcgm-migrate-sim"
VALID_DAYS = 3650
# 127.0.0.1, then the `kubernetes` Service's cluster IPs (the first of each service range)
IP_NAMES = ("127.0.0.1", *(str(cidr.network_address + 1) for cidr in SERVICE_CIDRS.values()))
DNS_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local")


class TLSUnavailable(RuntimeError):
    """The certificate cannot be made (neither `cryptography` nor `openssl`, or it failed)."""


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
    """A fresh self-signed P-256 certificate for `IP_NAMES` and `DNS_NAMES`, valid ten
    years."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "sim-tls.crt", directory / "sim-tls.key"
    try:
        _with_cryptography(cert, key)
    except ImportError:
        _with_openssl(cert, key)
    key.chmod(0o600)
    return Certificate(cert, key)


def _with_cryptography(cert: Path, key: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SUBJECT)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(private.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address(ip)) for ip in IP_NAMES]
            + [x509.DNSName(name) for name in DNS_NAMES]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(private, hashes.SHA256()))
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))


def _with_openssl(cert: Path, key: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise TLSUnavailable("the sim's TLS listener needs the `cryptography` package "
                             "(pip install cryptography) or the `openssl` command")
    result = subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", str(VALID_DAYS),
         "-subj", f"/CN={SUBJECT}",
         "-addext", "subjectAltName=" + ",".join(
             [f"IP:{ip}" for ip in IP_NAMES] + [f"DNS:{name}" for name in DNS_NAMES])],
        capture_output=True, text=True, check=False, timeout=30)
    if result.returncode != 0:
        raise TLSUnavailable(f"openssl could not make the sim's certificate: "
                             f"{result.stderr.strip()}")
