"""`deploy --check-image`: every model image must resolve in its registry before anything is applied.

Against real registries (CNCF Distribution, built from its Go module) holding real images that
crane pushed: one open, one behind a token service (the Bearer flow of Docker Hub, GHCR, ...),
one behind htpasswd (Basic). Each is stopped by its PID after this module's tests.
"""

from __future__ import annotations

import base64
import datetime
import json
import subprocess
import tarfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
import yaml

from deployments.rollout.image_check import ImageError, check_images, docker_credentials, model_images, parse_reference, resolve
from slipway.ports import LOOPBACK, free_port
from tests.conftest import run_module

IMAGE = "team/mlserver-onnx:0.1.0"
USER, PASSWORD = "alice", "s3cret-pass"
SERVICE, ISSUER = "slipway-test-registry", "slipway-test-token-service"


# ------------------------------------------------------------------ references and credentials (no registry)


@pytest.mark.parametrize(
    ("text", "registry", "repository", "reference", "url"),
    [
        (
            "slipway/mlserver-onnx:0.1.0",
            "docker.io",
            "slipway/mlserver-onnx",
            "0.1.0",
            "https://registry-1.docker.io/v2/slipway/mlserver-onnx/manifests/0.1.0",
        ),
        ("python", "docker.io", "library/python", "latest", "https://registry-1.docker.io/v2/library/python/manifests/latest"),
        ("docker.io/python:3.11", "docker.io", "library/python", "3.11", None),
        ("index.docker.io/slipway/x:1", "docker.io", "slipway/x", "1", None),
        ("ghcr.io/org/team/img:v1", "ghcr.io", "org/team/img", "v1", "https://ghcr.io/v2/org/team/img/manifests/v1"),
        ("localhost:5000/team/img", "localhost:5000", "team/img", "latest", "http://localhost:5000/v2/team/img/manifests/latest"),
        (
            "127.0.0.1:5000/team/img:1@sha256:" + "a" * 64,
            "127.0.0.1:5000",
            "team/img",
            "sha256:" + "a" * 64,
            "http://127.0.0.1:5000/v2/team/img/manifests/sha256:" + "a" * 64,
        ),
        (
            "registry.example.com:5000/img:1",
            "registry.example.com:5000",
            "img",
            "1",
            "https://registry.example.com:5000/v2/img/manifests/1",
        ),
    ],
)
def test_references_resolve_as_docker_reads_them(text, registry, repository, reference, url):
    ref = parse_reference(text)
    assert (ref.registry, ref.repository, ref.reference) == (registry, repository, reference)
    if url:
        assert ref.manifest_url == url


@pytest.mark.parametrize("text", ["Team/Img:1", "img@sha256:short", "ghcr.io/org/img:bad tag"])
def test_a_malformed_reference_is_one_line(text):
    with pytest.raises(ImageError, match="is not a valid reference"):
        parse_reference(text)


def test_docker_hub_credentials_are_found_under_the_key_docker_login_writes(tmp_path):
    config = _docker_config(
        tmp_path,
        {"https://index.docker.io/v1/": ("hub-user", "hub-pass"), "https://ghcr.io": ("gh-user", "gh:pass")},
        credHelpers={"gcr.io": "gcloud"},
    )
    hub, _ = docker_credentials("docker.io", config)
    assert (hub.username, hub.password) == ("hub-user", "hub-pass")
    gh, _ = docker_credentials("ghcr.io", config)
    assert (gh.username, gh.password) == ("gh-user", "gh:pass")  # only the first colon splits
    assert docker_credentials("gcr.io", config) == (None, "gcloud")
    assert docker_credentials("quay.io", tmp_path / "missing.json") == (None, None)


def test_model_images_are_the_seldon_deployments_containers_once_each():
    def sdep(*images):
        return {
            "kind": "SeldonDeployment",
            "spec": {
                "predictors": [
                    {"componentSpecs": [{"spec": {"containers": [{"name": "m", "image": image}]}}]} for image in images
                ]
            },
        }

    docs = [sdep("r/a:1", "r/b:1"), sdep("r/a:1"), {"kind": "PodMonitor", "spec": {}}]
    assert model_images(docs) == ["r/a:1", "r/b:1"]


@pytest.mark.parametrize(
    ("realm", "logins", "refusal"),
    [
        (
            "http://169.254.169.254/latest/meta-data",
            {},
            "points its token requests at http://169.254.169.254/latest/meta-data, a private address: Slipway sends none there",
        ),
        (
            "http://auth.example.com/token",
            {"registry.example.com": ("u", "p")},
            "token service http://auth.example.com/token is plain http; Slipway sends no credentials there",
        ),
    ],
)
def test_a_registry_cannot_steer_token_requests_where_they_do_harm(tmp_path, realm, logins, refusal):
    from deployments.rollout.image_check import _Registry

    challenge = requests.Response()
    challenge.status_code, challenge.headers["WWW-Authenticate"] = 401, f'Bearer realm="{realm}",service="x"'
    registry = _Registry(parse_reference("registry.example.com/team/img:1"), _docker_config(tmp_path, logins), requests.Session())
    with pytest.raises(ImageError, match=refusal):
        registry._authorization(challenge)  # before any request is sent


def test_an_unreachable_registry_is_one_line(tmp_path):
    port = free_port()  # nothing listens there
    with pytest.raises(ImageError) as raised:
        resolve(f"{LOOPBACK}:{port}/{IMAGE}", config_path=tmp_path / "config.json")
    assert str(raised.value) == (
        f"image {LOOPBACK}:{port}/{IMAGE}: cannot reach its registry at http://{LOOPBACK}:{port} (Connection refused): "
        "check the address and that the registry is up, and for a registry with a private CA set REQUESTS_CA_BUNDLE"
    )


def test_a_client_dry_run_does_not_check_images(record_files, reports_env, tmp_path):
    port = free_port()  # a registry that is not there: checking would fail
    result = run_module(
        "deployments",
        "deploy",
        "--version-record",
        str(record_files("3")),
        "--dry-run",
        "client",
        "--image",
        f"{LOOPBACK}:{port}/{IMAGE}",
        "--check-image",
        "--out",
        str(tmp_path / "out"),
        env={**reports_env, "KUBECONFIG": str(tmp_path / "none")},
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "client dry run, nothing sent" in result.stderr and "cannot reach" not in result.stderr


def test_make_deploy_push_pushes_then_deploys_the_pushed_image_checked():
    from tests.deployments.test_cli import _make

    for overlay, image in (("cpu", "mlserver-onnx:0.1.0"), ("gpu", "mlserver-onnx-gpu:0.1.0")):
        result = _make("-n", "deploy", "PUSH=1", "IMAGE_REPO=127.0.0.1:5000/team", f"OVERLAY={overlay}")
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        pushes = [i for i, line in enumerate(lines) if "slipway image push --repo 127.0.0.1:5000/team" in line]
        deploy = next(i for i, line in enumerate(lines) if "slipway deploy" in line)
        assert len(pushes) == 1 and pushes[0] < deploy
        assert f"--image 127.0.0.1:5000/team/{image} --check-image" in lines[deploy]
    plain = _make("-n", "deploy")
    assert "image push" not in plain.stdout and "--check-image" not in plain.stdout


# ------------------------------------------------------------------ real registries


def _docker_config(folder: Path, logins: dict[str, tuple[str, str]], **extra) -> Path:
    """A Docker config as `docker login` writes it without a credential helper: base64 user:password per host."""
    folder.mkdir(parents=True, exist_ok=True)
    auths = {
        host: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()} for host, (user, password) in logins.items()
    }
    path = folder / "config.json"
    path.write_text(json.dumps({"auths": auths, **extra}))
    return path


@pytest.fixture(scope="module")
def tools() -> dict[str, Path]:
    from localcluster.build import build_all
    from localcluster.components import COMPONENTS

    built = build_all(tuple(component for component in COMPONENTS if component.name in ("registry", "crane")))
    return {"registry": built["registry"] / "bin" / "registry", "crane": built["crane"] / "bin" / "crane"}


@contextmanager
def _registry(binary: Path, folder: Path, auth: dict | None = None) -> Iterator[str]:
    """A registry on a free loopback port storing into `folder`, tied to this process, stopped by PID after."""
    from localcluster.processes import last_lines, running, start, stop

    port = free_port()
    config = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(folder / "data")}},
        "http": {"addr": f"{LOOPBACK}:{port}", "secret": uuid.uuid4().hex},
        **({"auth": auth} if auth else {}),
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yml").write_text(yaml.safe_dump(config))
    process = start(
        "registry", binary, ["serve", str(folder / "config.yml")], log_dir=folder, env={"OTEL_TRACES_EXPORTER": "none"}, tied=True
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert running(process), f"the registry exited: {last_lines(process)}"
            try:
                requests.get(f"http://{LOOPBACK}:{port}/v2/", timeout=1)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, f"the registry did not answer in 30 s: {last_lines(process)}"
                time.sleep(0.1)
        yield f"{LOOPBACK}:{port}"
    finally:
        assert stop([process]) == ["registry"] and not running(process)


def _push(crane: Path, reference: str, folder: Path, docker_config: Path | None = None) -> str:
    """Push an image of one small layer to `reference` with crane, as a user's `docker push` would; its digest."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model-settings.json").write_text(json.dumps({"reference": reference}))
    with tarfile.open(folder / "layer.tar", "w") as tar:
        tar.add(folder / "model-settings.json", arcname="opt/model-settings.json")
    config_dir = docker_config.parent if docker_config else folder / "no-docker-config"
    result = subprocess.run(
        [str(crane), "append", "-f", str(folder / "layer.tar"), "-t", reference],
        env={"DOCKER_CONFIG": str(config_dir), "HOME": str(folder), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().rpartition("@")[2]


class TokenService:
    """The registry's token realm: Basic-authenticated (or anonymous) GETs answered with JWTs signed by a key whose
    certificate the registry trusts; `alice` may push and pull everything, anyone may pull `public/*`."""

    def __init__(self, folder: Path):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.bundle = folder / "token-ca.pem"
        folder.mkdir(parents=True, exist_ok=True)
        self.bundle.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        self.x5c = base64.b64encode(certificate.public_bytes(serialization.Encoding.DER)).decode()
        self.asked: list[tuple[str | None, list[str]]] = []  # (user, scopes) of every token request
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                user = None
                if header := self.headers.get("Authorization"):
                    user, _, password = base64.b64decode(header.removeprefix("Basic ")).decode().partition(":")
                    if (user, password) != (USER, PASSWORD):
                        return self._answer(401, {"details": "incorrect username or password"})
                service.asked.append((user, query.get("scope", [])))
                token = service.token(user, query.get("service", [""])[0], query.get("scope", []))
                self._answer(200, {"token": token, "access_token": token, "expires_in": 300})

            def _answer(self, status: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        # by name: crane (like go-containerregistry) refuses realms at private IP literals other than the registry's
        self.realm = f"http://localhost:{self.server.server_address[1]}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, user: str | None, audience: str, scopes: list[str]) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        access = []
        for scope in scopes:
            kind, name, actions = scope.split(":")
            granted = actions.split(",") if user else ["pull"] if name.startswith("public/") and "pull" in actions else []
            access.append({"type": kind, "name": name, "actions": granted})
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "sub": user or "",
            "aud": audience,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": uuid.uuid4().hex,
            "access": access,
        }

        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        signing_input = ".".join(
            b64(json.dumps(part).encode()) for part in ({"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}, claims)
        )
        return f"{signing_input}.{b64(self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256()))}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def open_registry(tools, tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(host, digest of team/mlserver-onnx:0.1.0) in a registry without authentication."""
    folder = tmp_path_factory.mktemp("open-registry")
    with _registry(tools["registry"], folder) as host:
        yield host, _push(tools["crane"], f"{host}/{IMAGE}", folder / "push")


@pytest.fixture(scope="module")
def token_registry(tools, tmp_path_factory) -> Iterator[tuple[str, TokenService, dict[str, str]]]:
    """(host, its token service, repository -> digest) in a registry behind a token service, as Docker Hub is."""
    folder = tmp_path_factory.mktemp("token-registry")
    tokens = TokenService(folder)
    auth = {"token": {"realm": tokens.realm, "service": SERVICE, "issuer": ISSUER, "rootcertbundle": str(tokens.bundle)}}
    try:
        with _registry(tools["registry"], folder, auth) as host:
            pusher = _docker_config(folder / "pusher", {host: (USER, PASSWORD)})
            yield (
                host,
                tokens,
                {
                    repository: _push(tools["crane"], f"{host}/{repository}:0.1.0", folder / "push", pusher)
                    for repository in ("team/mlserver-onnx", "public/mlserver-onnx")
                },
            )
    finally:
        tokens.close()


@pytest.fixture(scope="module")
def htpasswd_registry(tools, tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(host, digest) in a registry behind htpasswd: Basic authentication, as many self-hosted registries are."""
    bcrypt = pytest.importorskip("bcrypt")
    folder = tmp_path_factory.mktemp("htpasswd-registry")
    (folder / "htpasswd").write_text(f"{USER}:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=5)).decode()}\n")
    with _registry(tools["registry"], folder, {"htpasswd": {"realm": "slipway", "path": str(folder / "htpasswd")}}) as host:
        pusher = _docker_config(folder / "pusher", {host: (USER, PASSWORD)})
        yield host, _push(tools["crane"], f"{host}/{IMAGE}", folder / "push", pusher)


@pytest.mark.slow
def test_the_rendered_model_image_resolves_to_the_digest_that_was_pushed(open_registry, record_files, reports_env, tmp_path):
    host, digest = open_registry
    out = tmp_path / "manifests"
    run_module(
        "deployments",
        "render",
        "--version-record",
        str(record_files("3")),
        "--image",
        f"{host}/{IMAGE}",
        "--out",
        str(out),
        env=reports_env,
        timeout=120,
    )
    docs = [doc for path in sorted(out.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert check_images(docs, config_path=tmp_path / "config.json") == {f"{host}/{IMAGE}": digest}
    assert resolve(f"{host}/team/mlserver-onnx@{digest}", config_path=tmp_path / "config.json") == digest


@pytest.mark.slow
def test_a_tag_that_was_never_pushed_says_push_it_first(open_registry, tmp_path):
    host, _ = open_registry
    with pytest.raises(ImageError) as raised:
        resolve(f"{host}/team/mlserver-onnx:0.2.0", config_path=tmp_path / "config.json")
    assert str(raised.value) == (
        f"image {host}/team/mlserver-onnx:0.2.0 is not in its registry: {host} has no "
        f"team/mlserver-onnx:0.2.0 (MANIFEST_UNKNOWN): push it first: make push IMAGE_REPO={host}/team"
    )


@pytest.mark.slow
def test_a_token_registry_gives_anonymous_pulls_of_a_public_image(token_registry, tmp_path):
    host, tokens, digests = token_registry
    tokens.asked.clear()
    assert resolve(f"{host}/public/mlserver-onnx:0.1.0", config_path=tmp_path / "config.json") == digests["public/mlserver-onnx"]
    assert tokens.asked == [(None, ["repository:public/mlserver-onnx:pull"])]


@pytest.mark.slow
def test_a_private_image_without_credentials_says_how_to_log_in(token_registry, tmp_path):
    host, _, _ = token_registry
    config = tmp_path / "config.json"
    with pytest.raises(ImageError) as raised:
        resolve(f"{host}/{IMAGE}", config_path=config)
    assert str(raised.value) == (
        f"image {host}/{IMAGE}: {host} wants credentials to pull team/mlserver-onnx (401) and {config} has none for it: "
        f"log in with `docker login {host}` (DOCKER_CONFIG= picks another config folder) (or it does not exist there: "
        f"push it first: make push IMAGE_REPO={host}/team)"
    )


@pytest.mark.slow
def test_a_private_image_resolves_with_the_docker_config_s_credentials(token_registry, tmp_path, monkeypatch):
    host, tokens, digests = token_registry
    _docker_config(tmp_path / "docker", {f"https://{host}": (USER, PASSWORD)})
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))  # where `docker login` would have written
    tokens.asked.clear()
    assert resolve(f"{host}/{IMAGE}") == digests["team/mlserver-onnx"]
    assert tokens.asked == [(USER, ["repository:team/mlserver-onnx:pull"])]


@pytest.mark.slow
def test_credentials_the_registry_refuses_say_log_in_again(token_registry, tmp_path):
    host, _, _ = token_registry
    config = _docker_config(tmp_path, {host: (USER, "an-old-password")})
    with pytest.raises(ImageError) as raised:
        resolve(f"{host}/{IMAGE}", config_path=config)
    assert str(raised.value) == (
        f"image {host}/{IMAGE}: {host} refused the credentials for it in {config} (401): log in again with `docker login {host}`"
    )


@pytest.mark.slow
def test_a_credential_helper_is_named_as_not_read(token_registry, tmp_path):
    host, _, _ = token_registry
    config = _docker_config(tmp_path, {}, credsStore="desktop")
    with pytest.raises(ImageError) as raised:
        resolve(f"{host}/{IMAGE}", config_path=config)
    message = str(raised.value)
    assert "\n" not in message
    assert (
        f"{config} keeps them in the credential helper docker-credential-desktop, which Slipway does not read: "
        f"put them in an `auths` entry of a config of their own, e.g. `DOCKER_CONFIG=~/.docker-slipway docker login "
        f"{host}`"
    ) in message


@pytest.mark.slow
def test_an_htpasswd_registry_takes_basic_credentials(htpasswd_registry, tmp_path):
    host, digest = htpasswd_registry
    with pytest.raises(ImageError, match=r"wants credentials to pull team/mlserver-onnx \(401\)"):
        resolve(f"{host}/{IMAGE}", config_path=tmp_path / "none.json")
    assert resolve(f"{host}/{IMAGE}", config_path=_docker_config(tmp_path, {host: (USER, PASSWORD)})) == digest
    with pytest.raises(ImageError, match=r"refused the credentials for it in .* \(401\): wrong, or without pull access"):
        resolve(f"{host}/{IMAGE}", config_path=_docker_config(tmp_path / "bad", {host: (USER, "nope")}))
