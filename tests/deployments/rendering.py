"""A renderer with its `RenderOptions` given as keywords, for tests that render many ways."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from deployments.render.overlay import Rendered, RenderOptions, render

R = TypeVar("R", bound=Rendered)


def rendering(renderer: Callable[[str | Path, RenderOptions], R] = render, **defaults: Any) -> Callable[..., R]:
    """`renderer` called with `RenderOptions(**options)` over `defaults`, kustomize's built-in engine unless they say
    otherwise (as fast as kubectl's, and the same everywhere)."""

    def call(overlay: str | Path, **options: Any) -> R:
        return renderer(overlay, RenderOptions(**{"engine": "builtin", **defaults, **options}))

    return call
