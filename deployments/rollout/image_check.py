"""Does an image reference resolve in its registry? `deploy --check-image` asks before anything is applied.

One OCI Distribution API request per image, `HEAD /v2/<repository>/manifests/<tag or digest>`,
answering the registry's `WWW-Authenticate` challenge (a Bearer token from its realm, or Basic)
anonymously or with the user's `docker login` credentials: the `auths` entries of the Docker config
($DOCKER_CONFIG/config.json, else ~/.docker/config.json). Credential helpers (credsStore,
credHelpers) are not run. Loopback registries are spoken to over http, every other over https.
Docker Hub's short names (`slipway/mlserver-onnx:0.1.0`, `python:3.11`) resolve as Docker does.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import requests

from deployments.rollout.apply import DeployError

MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
DOCKER_HUB_NAMES = {DOCKER_HUB, "index.docker.io", DOCKER_HUB_API}
TIMEOUT_S = (5.0, 20.0)  # connect, read
_REPOSITORY = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}")
_CHALLENGE_PARAM = re.compile(r'(\w+)=(?:"([^"]*)"|([^\s,]*))')


class ImageError(DeployError):
    """The image does not resolve; the message names what to do."""


@dataclass(frozen=True)
class ImageRef:
    text: str  # as written in the manifests
    registry: str  # host[:port]; docker.io for Docker Hub
    repository: str
    reference: str  # tag or digest

    @property
    def host(self) -> str:
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def loopback(self) -> bool:
        return _is_loopback(self.host)

    @property
    def manifest_url(self) -> str:
        return f"{'http' if self.loopback else 'https'}://{self.host}/v2/{self.repository}/manifests/{self.reference}"

    @property
    def image_repo(self) -> str:
        """What `make push IMAGE_REPO=` takes to push this image: the reference up to its last path part."""
        name = self.text.split("@")[0]
        folder = name.rpartition("/")[0]
        return folder if folder else "docker.io/<your account>"


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address `host` (host[:port], [v6]:port) is a literal of; None for a name."""
    try:
        return ipaddress.ip_address(urllib.parse.urlsplit(f"//{host}").hostname or "")
    except ValueError:
        return None


def _is_loopback(host: str) -> bool:
    address = _address(host)
    return address.is_loopback if address else urllib.parse.urlsplit(f"//{host}").hostname == "localhost"


def _is_internal(host: str) -> bool:
    """Whether `host` is an IP literal of a loopback, private or link-local address."""
    address = _address(host)
    return bool(address and (address.is_private or address.is_loopback or address.is_link_local))


def parse_reference(text: str) -> ImageRef:
    """An image reference as Docker and the kubelet read it: registry, repository, tag (default latest) or digest."""
    name, _, digest = text.strip().partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        raise ImageError(f"image {text!r} is not a valid reference: {digest!r} is no digest (sha256:<64 hex>)")
    tag = ""
    slash = name.rfind("/")
    if name.rfind(":") > slash:
        name, tag = name.rsplit(":", 1)
    first, _, rest = name.partition("/")
    if rest and (any(c in first for c in ".:") or first == "localhost" or first != first.lower()):
        registry, repository = first, rest
    else:
        registry, repository = DOCKER_HUB, name
    if registry in DOCKER_HUB_NAMES:
        registry = DOCKER_HUB
        if "/" not in repository:
            repository = f"library/{repository}"
    if not _REPOSITORY.fullmatch(repository) or (tag and not _TAG.fullmatch(tag)):
        raise ImageError(
            f"image {text!r} is not a valid reference (registry/repository:tag or @sha256:digest, the repository in lower case)"
        )
    return ImageRef(text.strip(), registry, repository, digest or tag or "latest")


# ------------------------------------------------------------------ credentials


def docker_config_path() -> Path:
    folder = os.environ.get("DOCKER_CONFIG")
    return (Path(folder) if folder else Path.home() / ".docker") / "config.json"


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str


def _normalized_host(key: str) -> str:
    host = re.sub(r"^[a-z]+://", "", key.strip().lower()).split("/")[0]
    return DOCKER_HUB if host in DOCKER_HUB_NAMES else host


def docker_credentials(registry: str, config_path: Path) -> tuple[Credentials | None, str | None]:
    """(the `auths` entry's username and password for `registry`, or None; the credential helper the config names
    for it, which is not run)."""
    try:
        config = json.loads(config_path.read_text())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as err:
        raise ImageError(
            f"cannot read the Docker config {config_path}: {err}: fix it, or point DOCKER_CONFIG at another folder"
        ) from err
    wanted = _normalized_host(registry)
    helper = next(
        (name for key, name in (config.get("credHelpers") or {}).items() if _normalized_host(key) == wanted),
        config.get("credsStore") or None,
    )
    for key, entry in (config.get("auths") or {}).items():
        if _normalized_host(key) != wanted or not isinstance(entry, dict):
            continue
        if entry.get("auth"):
            try:
                username, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except ValueError as err:
                raise ImageError(
                    f"the Docker config {config_path} holds an `auth` for {key} that is not base64 of "
                    f"user:password: log in again with `{_login(registry)}`"
                ) from err
            return Credentials(username, password), helper
        if entry.get("username") and entry.get("password"):
            return Credentials(entry["username"], entry["password"]), helper
    return None, helper


def _login(registry: str) -> str:
    return "docker login" if registry == DOCKER_HUB else f"docker login {registry}"


# ------------------------------------------------------------------ the registry


def _challenge(response: requests.Response) -> tuple[str, dict[str, str]]:
    header = response.headers.get("WWW-Authenticate", "")
    scheme, _, params = header.strip().partition(" ")
    return scheme.lower(), {key.lower(): quoted or bare for key, quoted, bare in _CHALLENGE_PARAM.findall(params)}


def _reason(err: requests.RequestException) -> str:
    """The cause in a few words: connection refused, name not known, a certificate, a timeout."""
    if isinstance(err, requests.Timeout):
        return f"no answer within {TIMEOUT_S[0]:.0f}+{TIMEOUT_S[1]:.0f}s"
    text = str(err)
    for pattern in (
        r"certificate verify failed:?[^'\")]*",
        r"\[Errno -?\d+\] ([^'\")]+)",
        r"(Name or service not known)",
        r"(wrong version number)",
    ):
        if match := re.search(pattern, text):
            return (match.group(1) if match.groups() else match.group(0)).strip()
    return type(err).__name__


class _Registry:
    """One image's requests: the session, and the Authorization the challenge asked for."""

    def __init__(self, ref: ImageRef, config_path: Path, session: requests.Session):
        self.ref, self.config_path, self.session = ref, config_path, session
        self.credentials, self.helper = docker_credentials(ref.registry, config_path)

    def _send(self, method: str, url: str, **kwargs) -> requests.Response:
        try:
            return self.session.request(method, url, timeout=TIMEOUT_S, **kwargs)
        except requests.RequestException as err:
            what, where = ("its registry", url.split("/v2/")[0]) if "/v2/" in url else ("its token service", url)
            raise ImageError(
                f"image {self.ref.text}: cannot reach {what} at {where} ({_reason(err)}): check the "
                "address and that the registry is up, and for a registry with a private CA set "
                "REQUESTS_CA_BUNDLE"
            ) from err

    def _authorization(self, response: requests.Response) -> str | None:
        """The Authorization header that answers the registry's 401 challenge; None when it needs credentials
        this machine does not have."""
        scheme, params = _challenge(response)
        if scheme == "basic":
            if self.credentials is None:
                return None
            pair = f"{self.credentials.username}:{self.credentials.password}".encode()
            return f"Basic {base64.b64encode(pair).decode()}"
        if scheme != "bearer" or not params.get("realm"):
            raise ImageError(
                f"image {self.ref.text}: {self.ref.registry} asks for authentication Slipway does not "
                f"speak ({response.headers.get('WWW-Authenticate', 'no WWW-Authenticate header')!r})"
            )
        realm = params["realm"]
        realm_host = urllib.parse.urlsplit(realm).netloc
        if self.credentials is not None and realm.startswith("http://") and not _is_loopback(realm_host):
            raise ImageError(
                f"image {self.ref.text}: {self.ref.registry}'s token service {realm} is plain http; "
                "Slipway sends no credentials there"
            )
        if realm_host != self.ref.host and not self.ref.loopback and _is_internal(realm_host):
            # as go-containerregistry does: a registry must not steer requests to the metadata service or the LAN
            raise ImageError(
                f"image {self.ref.text}: {self.ref.registry} points its token requests at {realm}, a "
                "private address: Slipway sends none there"
            )
        query = {"scope": params.get("scope") or f"repository:{self.ref.repository}:pull"}
        if params.get("service"):
            query["service"] = params["service"]
        auth = (self.credentials.username, self.credentials.password) if self.credentials else None
        answer = self._send("GET", realm, params=query, auth=auth)
        if answer.status_code in (401, 403) and self.credentials is not None:
            raise ImageError(
                f"image {self.ref.text}: {self.ref.registry} refused the credentials for it in "
                f"{self.config_path} ({answer.status_code}): log in again with `{_login(self.ref.registry)}`"
            )
        if answer.status_code != 200:
            return None
        try:
            token = answer.json().get("token") or answer.json().get("access_token")
        except ValueError:
            token = None
        if not token:
            raise ImageError(f"image {self.ref.text}: {realm} answered without a token")
        return f"Bearer {token}"

    def resolve(self) -> str:
        headers = {"Accept": ", ".join(MANIFEST_TYPES)}
        response = self._send("HEAD", self.ref.manifest_url, headers=headers)
        if response.status_code == 401:
            authorization = self._authorization(response)
            if authorization is not None:
                response = self._send("HEAD", self.ref.manifest_url, headers={**headers, "Authorization": authorization})
        if response.status_code == 200:
            return response.headers.get("Docker-Content-Digest", "")
        if response.status_code in (401, 403):
            raise ImageError(self._refused(response.status_code))
        if response.status_code == 404:
            raise ImageError(
                f"image {self.ref.text} is not in its registry: {self.ref.registry} has no "
                f"{self.ref.repository}{'@' if ':' in self.ref.reference else ':'}{self.ref.reference}"
                f"{self._error_code(headers, response)}: push it first: make push IMAGE_REPO={self.ref.image_repo}"
            )
        raise ImageError(
            f"image {self.ref.text}: {self.ref.registry} answered {response.status_code} "
            f"{response.reason}{self._error_code(headers, response)} to {self.ref.manifest_url}"
        )

    def _error_code(self, headers: dict, response: requests.Response) -> str:
        """The registry's error code (MANIFEST_UNKNOWN, NAME_UNKNOWN), from a GET: a HEAD's answer has no body."""
        authorization = response.request.headers.get("Authorization")
        answer = self._send(
            "GET", self.ref.manifest_url, headers={**headers, **({"Authorization": authorization} if authorization else {})}
        )
        try:
            errors = answer.json().get("errors") or []
        except (ValueError, AttributeError):
            return ""
        codes = sorted({error.get("code", "") for error in errors if isinstance(error, dict)} - {""})
        return f" ({', '.join(codes)})" if codes else ""

    def _refused(self, status: int) -> str:
        ref, login = self.ref, _login(self.ref.registry)
        missing = f" (or it does not exist there: push it first: make push IMAGE_REPO={ref.image_repo})"
        if self.credentials is not None:
            return (
                f"image {ref.text}: {ref.registry} refused the credentials for it in {self.config_path} ({status}): "
                f"wrong, or without pull access to {ref.repository}{missing}; log in again with `{login}`"
            )
        if self.helper:
            return (
                f"image {ref.text}: {ref.registry} wants credentials to pull {ref.repository} ({status}), and "
                f"{self.config_path} keeps them in the credential helper docker-credential-{self.helper}, which "
                f"Slipway does not read: put them in an `auths` entry of a config of their own, e.g. "
                f"`DOCKER_CONFIG=~/.docker-slipway {login}` where no helper is set up, and deploy with "
                f"DOCKER_CONFIG=~/.docker-slipway{missing}"
            )
        return (
            f"image {ref.text}: {ref.registry} wants credentials to pull {ref.repository} ({status}) and "
            f"{self.config_path} has none for it: log in with `{login}` (DOCKER_CONFIG= picks another "
            f"config folder){missing}"
        )


def resolve(image: str, *, config_path: Path | None = None, session: requests.Session | None = None) -> str:
    """The digest `image` resolves to in its registry (may be empty where the registry does not say);
    ImageError naming the fix where it does not resolve."""
    ref = parse_reference(image)
    if session is not None:
        return _Registry(ref, config_path or docker_config_path(), session).resolve()
    with requests.Session() as http:
        return _Registry(ref, config_path or docker_config_path(), http).resolve()


def model_images(docs: list[dict]) -> list[str]:
    """Every model container's image in the rendered SeldonDeployments, once each, in order."""
    from deployments.render import seldon

    images: dict[str, None] = {}
    for doc in docs:
        if doc.get("kind") != "SeldonDeployment":
            continue
        for _, _, component in seldon.pod_specs(doc):
            for container in component.get("spec", {}).get("containers", []):
                if container.get("image"):
                    images[container["image"]] = None
    return list(images)


def check_images(docs: list[dict], *, config_path: Path | None = None) -> dict[str, str]:
    """image -> digest for every model container's image; ImageError on the first that does not resolve."""
    with requests.Session() as session:
        return {image: resolve(image, config_path=config_path, session=session) for image in model_images(docs)}
