"""The local cluster's certificates: one CA for every server and client, one for the front proxy.

Everything listens on loopback, so every serving certificate names 127.0.0.1 and localhost,
plus the in-cluster names a client checks (the API server's `kubernetes.default.svc`, the
aggregated metrics API's `metrics-server.kube-system.svc`). Keys are ECDSA P-256: fast to make.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from slipway import atomic

VALID_FOR = datetime.timedelta(days=365)
LOOPBACK = ("127.0.0.1", "localhost")
SERVICE_IP = "10.96.0.1"  # the first address of the service range: the `kubernetes` Service
API_SERVER_NAMES = (
    *LOOPBACK,
    SERVICE_IP,
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
KEDA_NAMES = (
    *LOOPBACK,
    *(f"{service}.keda.svc" for service in ("keda-operator", "keda-metrics-apiserver", "keda-admission-webhooks")),
)
ADMIN_USER, ADMIN_GROUP = "slipway-admin", "system:masters"
# the API server's identity towards kubelets (logs, exec, port-forward): what kubeadm names apiserver-kubelet-client
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"
NODES_GROUP = "system:nodes"  # with a user system:node:<name>: what the Node authorizer lets act for that node
FRONT_PROXY_USER = "front-proxy-client"
KUBE_PROXY_USER = "system:kube-proxy"  # bound to ClusterRole system:node-proxier by the API server's bootstrap policy


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    atomic.write_bytes(
        path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _sign(
    folder: Path,
    name: str,
    subject: x509.Name,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    server_names: tuple[str, ...] = (),
    client: bool = False,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    issuer_cert, issuer_key = issuer if issuer else (None, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject if issuer_cert else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server_names else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if server_names:
        builder = builder.add_extension(x509.SubjectAlternativeName([_san(entry) for entry in server_names]), critical=False)
    cert = builder.sign(issuer_key, hashes.SHA256())
    atomic.write_bytes(folder / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM))
    _write_key(folder / f"{name}.key", key)
    return cert, key


def _san(entry: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(entry))
    except ValueError:
        return x509.DNSName(entry)


@dataclass(frozen=True)
class ClusterPKI:
    """Paths of every certificate and key the control plane uses, under one folder."""

    folder: Path

    def pair(self, name: str) -> Pair:
        return Pair(self.folder / f"{name}.crt", self.folder / f"{name}.key")

    @property
    def ca(self) -> Pair:
        return self.pair("ca")

    @property
    def front_proxy_ca(self) -> Pair:
        return self.pair("front-proxy-ca")

    @property
    def service_account_key(self) -> Path:
        return self.folder / "service-account.key"

    @property
    def service_account_public_key(self) -> Path:
        return self.folder / "service-account.pub"

    @classmethod
    def create(cls, folder: Path) -> ClusterPKI:
        """Make every certificate afresh in `folder`."""
        folder.mkdir(parents=True, exist_ok=True)
        ca = _sign(folder, "ca", _name("slipway-local-cluster-ca"), None, ca=True)
        front_proxy_ca = _sign(folder, "front-proxy-ca", _name("slipway-front-proxy-ca"), None, ca=True)
        _sign(folder, "apiserver", _name("kube-apiserver"), ca, server_names=API_SERVER_NAMES)
        _sign(folder, "admin", _name(ADMIN_USER, ADMIN_GROUP), ca, client=True)
        _sign(folder, "apiserver-kubelet-client", _name(KUBELET_CLIENT_USER, ADMIN_GROUP), ca, client=True)
        _sign(folder, "front-proxy-client", _name(FRONT_PROXY_USER), front_proxy_ca, client=True)
        _sign(folder, "seldon-webhook", _name("seldon-webhook-service"), ca, server_names=LOOPBACK)
        _sign(folder, "kserve-webhook", _name("kserve-webhook-server-service"), ca, server_names=LOOPBACK)
        _sign(folder, "kwok", _name("kwok"), ca, server_names=LOOPBACK)
        _sign(folder, "metrics-server", _name("metrics-server"), ca, server_names=(*LOOPBACK, "metrics-server.kube-system.svc"))
        # KEDA's one pair, as its own cert rotation makes it: the operator's gRPC metrics service, the adapter (its
        # client there, and the external metrics API's server) and the admission webhooks all present it
        _sign(folder, "keda", _name("keda"), ca, server_names=KEDA_NAMES, client=True)
        service_account = ec.generate_private_key(ec.SECP256R1())
        _write_key(folder / "service-account.key", service_account)
        atomic.write_bytes(
            folder / "service-account.pub",
            service_account.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
        return cls(folder)

    def sign_node(self, node: str, address: str) -> tuple[Pair, Pair]:
        """A real node's kubelet pairs, signed by the cluster's CA: its client certificate (user `system:node:<node>`
        in group `system:nodes`, as the Node authorizer expects) and its serving certificate for `address`, which the
        API server and metrics-server reach it at."""
        ca_cert = x509.load_pem_x509_certificate(self.ca.cert.read_bytes())
        ca_key = serialization.load_pem_private_key(self.ca.key.read_bytes(), password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        _sign(self.folder, f"kubelet-{node}-client", _name(f"system:node:{node}", NODES_GROUP), (ca_cert, ca_key), client=True)
        _sign(self.folder, f"kubelet-{node}", _name(f"system:node:{node}"), (ca_cert, ca_key), server_names=(address, node))
        return self.pair(f"kubelet-{node}-client"), self.pair(f"kubelet-{node}")

    def sign_kube_proxy(self) -> Pair:
        """kube-proxy's client certificate: user `system:kube-proxy`, which the API server's bootstrap RBAC binds to the
        ClusterRole `system:node-proxier` (read Services, EndpointSlices and Nodes; write Events)."""
        ca_cert = x509.load_pem_x509_certificate(self.ca.cert.read_bytes())
        ca_key = serialization.load_pem_private_key(self.ca.key.read_bytes(), password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        _sign(self.folder, "kube-proxy", _name(KUBE_PROXY_USER), (ca_cert, ca_key), client=True)
        return self.pair("kube-proxy")
