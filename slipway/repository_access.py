"""Who may call MLServer's model repository API (index, load, unload): the setting and the decision.

MLServer answers `POST /v2/repository/models/<name>/unload` (gRPC `RepositoryModelUnload`) from
anyone who reaches its port, so one anonymous request takes the model down. In Slipway's servers
the API is refused unless a process-level setting opens it, read once from the environment:

- `SLIPWAY_REPOSITORY_API`: `closed` (the default, and what the rendered manifests set) refuses
  every call; `open` admits callers from loopback (127.0.0.1, ::1) and callers that send
  `Authorization: Bearer <token>` (gRPC: metadata `authorization`) with the right token.
- `SLIPWAY_REPOSITORY_TOKEN`: that token; in a pod it comes from a Secret (`secretKeyRef`, see
  `python -m deployments render --repository-token-secret`), never from the manifest itself.
  Unset, `open` admits loopback callers only.

A caller that sends an `Authorization` header is judged on it, wherever it calls from: a wrong
token is refused over loopback too. A request carrying proxy headers (`Forwarded`,
`X-Forwarded-For`, `X-Real-IP`) was relayed for someone else, so its loopback peer admits nothing.

Every refusal is HTTP 403 (gRPC PERMISSION_DENIED), a missing token included, with a one-line
message saying what would be admitted. Not 401/UNAUTHENTICATED: in a closed server no credential
helps, and one status for every refusal tells a prober nothing about which credential might.

This module decides; `wrappers.repository_api` puts the decision in front of MLServer's REST
routes and gRPC methods. It imports nothing of MLServer, so tests and the launchers can use it.
"""

from __future__ import annotations

import hmac
import ipaddress
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError, field_validator

from slipway.cli import one_line
from slipway.runtime_settings import SettingsError

API_ENV = "SLIPWAY_REPOSITORY_API"
TOKEN_ENV = "SLIPWAY_REPOSITORY_TOKEN"
MODES = ("closed", "open")
MIN_TOKEN_CHARS = 16
# Headers a proxy adds when it relays a request: the caller is elsewhere, whatever the peer address says.
FORWARDING_HEADERS = frozenset({"forwarded", "x-forwarded-for", "x-real-ip"})
AUTHORIZATION = "authorization"
_LOOPBACK = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))
DENIED_STATUS = 403  # and gRPC PERMISSION_DENIED

_HOW_TO_OPEN = (
    f"set {API_ENV}=open (render: --repository-api open --repository-token-secret NAME) to admit "
    f"loopback callers and callers sending 'Authorization: Bearer <token>' with the token in {TOKEN_ENV}"
)
CLOSED = f"the model repository API (index, load, unload) is closed in this server; {_HOW_TO_OPEN}"


class RepositoryAccess(BaseModel):
    """The repository API's setting for this server process."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api: Literal["closed", "open"] = "closed"
    token: SecretStr | None = None

    @field_validator("token")
    @classmethod
    def _check_token(cls, token: SecretStr | None) -> SecretStr | None:
        if token is None:
            return None
        value = token.get_secret_value()
        if any(char.isspace() or not char.isprintable() for char in value):
            raise ValueError(
                f"{TOKEN_ENV} holds whitespace or control characters (a Secret written from a file "
                "often ends in a newline): store the token alone, e.g. kubectl create secret generic "
                "NAME --from-literal=token=$(openssl rand -hex 32)"
            )
        if len(value) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"{TOKEN_ENV} has {len(value)} characters, fewer than {MIN_TOKEN_CHARS}: use a random "
                "token, e.g. $(openssl rand -hex 32)"
            )
        return token

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RepositoryAccess:
        """The setting `env` describes; SettingsError naming the variable and the fix when it is not valid."""
        api = env.get(API_ENV, "closed")
        if api not in MODES:
            raise SettingsError(
                f"{API_ENV}={api!r} is not one of {', '.join(MODES)}: set {API_ENV}=closed to refuse "
                "the model repository API, or open to admit loopback callers and bearer-token holders"
            )
        token = env.get(TOKEN_ENV)
        if token is not None and api == "closed":
            raise SettingsError(
                f"{TOKEN_ENV} is set but {API_ENV} is closed, which admits no caller: set {API_ENV}=open "
                f"to admit callers with the token, or unset {TOKEN_ENV}"
            )
        try:  # validated from the environment's strings: the model's validators turn them into the typed fields
            return cls.model_validate({"api": api, "token": token})
        except ValidationError as err:
            raise SettingsError(one_line(err, whole="repository API")) from err

    def refusal(self, peer: str | None, headers: Iterable[tuple[str, str | bytes]]) -> str | None:
        """None to admit the call; else why it is refused, in one line (HTTP 403, gRPC PERMISSION_DENIED).

        `peer`: the caller's IP address as the socket reports it (None where unknown: not loopback);
        `headers`: the request's headers (gRPC: its metadata), names in lower case.
        """
        if self.api == "closed":
            return CLOSED
        authorization, forwarded = [], False
        for name, value in headers:
            name = name.lower()
            forwarded = forwarded or name in FORWARDING_HEADERS
            if name == AUTHORIZATION:
                authorization.append(value.decode("latin-1") if isinstance(value, bytes) else value)
        if authorization:
            return self._judge(authorization)
        if is_loopback(peer) and not forwarded:
            return None
        if self.token is None:
            return (
                f"the model repository API admits only loopback callers in this server (it has no {TOKEN_ENV}; "
                "render with --repository-token-secret NAME to admit callers with that Secret's bearer token)"
            )
        return (
            "the model repository API admits only loopback callers and callers sending 'Authorization: Bearer "
            f"<token>' with the token in {TOKEN_ENV}; this caller is neither"
        )

    def _judge(self, authorization: list[str]) -> str | None:
        """A caller that sends credentials is admitted by them alone: the right bearer token, once."""
        if len(authorization) > 1:
            return "the request carries more than one Authorization header; send one: 'Authorization: Bearer <token>'"
        scheme, _, presented = authorization[0].strip().partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            return "the Authorization header is not 'Bearer <token>'; send the repository token that way"
        if self.token is None:
            return (
                f"this server has no {TOKEN_ENV} to check a bearer token against; call from loopback without "
                f"an Authorization header, or give the server a token (render --repository-token-secret NAME)"
            )
        expected = self.token.get_secret_value().encode()
        if not hmac.compare_digest(presented.strip().encode("utf-8", "surrogateescape"), expected):
            return f"the bearer token does not match {TOKEN_ENV} (the Secret named at render by --repository-token-secret)"
        return None


def is_loopback(peer: str | None) -> bool:
    """Whether `peer` is 127.0.0.1 or ::1 (also as ::ffff:127.0.0.1), where a client on the same host or pod
    calls from. Not the rest of 127.0.0.0/8: Istio's sidecar hands remote callers on from 127.0.0.6."""
    if not peer:
        return False
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address) in _LOOPBACK


def grpc_peer_address(peer: str | None) -> str | None:
    """The IP address in gRPC's peer string ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000", URI-escaped or not);
    None for any other kind of peer (a Unix socket)."""
    if not peer:
        return None
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host = urllib.parse.unquote(rest).rpartition(":")[0]
    return host.removeprefix("[").removesuffix("]") or None
