"""The model repository API's setting in every predictor's model container (`render --repository-api`).

MLServer's repository API (index, load, unload) takes a model down with one request; the runtime
refuses it unless `SLIPWAY_REPOSITORY_API` opens it (`slipway.repository_access`). Rendering
writes the setting into each model container: `closed` (the default), or `open` with the bearer
token read from a Secret (`secretKeyRef`), so that no token ever sits in a manifest. Also the
MLServer setting that installs the guard (`MLSERVER_MODEL_REPOSITORY_IMPLEMENTATION`), which the
base already sets: pinned here, an overlay of one's own cannot leave the API unguarded.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from deployments.render import seldon
from slipway.repository_access import API_ENV, MODES, TOKEN_ENV
from slipway.server_process import HOOK, HOOK_ENV

TOKEN_KEY = "token"  # the key of the token in the Secret
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_OURS = (HOOK_ENV, API_ENV, TOKEN_ENV)


class RepositoryApiError(ValueError):
    """The repository API cannot be rendered as asked; the message says what to pass."""


def container_env(mode: str, token_secret: str | None) -> list[dict]:
    """The model container's env entries for `mode`, checked."""
    if mode not in MODES:
        raise RepositoryApiError(f"unknown repository API setting {mode!r}; choose one of {', '.join(MODES)}")
    if mode == "closed" and token_secret:
        raise RepositoryApiError(
            f"--repository-token-secret {token_secret} with the repository API closed admits no "
            "caller: add --repository-api open (REPOSITORY_API=open), or drop the Secret"
        )
    if mode == "open" and not token_secret:
        raise RepositoryApiError(
            "--repository-api open needs --repository-token-secret NAME (REPOSITORY_TOKEN_SECRET=NAME): a Secret in "
            f"the model's namespace whose key {TOKEN_KEY!r} holds the bearer token callers send (create it with "
            f"kubectl create secret generic NAME --from-literal={TOKEN_KEY}=$(openssl rand -hex 32))"
        )
    env: list[dict[str, Any]] = [{"name": HOOK_ENV, "value": HOOK}, {"name": API_ENV, "value": mode}]
    if token_secret:
        if len(token_secret) > 253 or not _SECRET_NAME.match(token_secret):
            raise RepositoryApiError(
                f"--repository-token-secret {token_secret!r} is not a Secret name: use lower-case "
                "letters, digits, '-' and '.', starting and ending with a letter or digit"
            )
        env.append({"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": token_secret, "key": TOKEN_KEY}}})
    return env


def pin_env(sdep: dict, env: list[dict]) -> None:
    """Set `env` in every predictor's model container (the one named like its graph), replacing ours there."""
    for predictor, _, component in seldon.pod_specs(sdep):
        for container in component.get("spec", {}).get("containers", []):
            if container.get("name") == predictor["graph"]["name"]:
                kept = [item for item in container.get("env", []) if item.get("name") not in _OURS]
                container["env"] = [*kept, *copy.deepcopy(env)]  # no shared objects: YAML would alias them
