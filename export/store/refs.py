"""Names, tags and version references (`NAME:NUMBER`, `NAME:latest`, `NAME@TAG`), parsed once at the edge."""

from __future__ import annotations

from dataclasses import dataclass

from slipway.artifact import MODEL_NAME  # a tag follows the same rule: both end up in URLs and paths

LATEST = "latest"


class RefError(ValueError):
    """A model name, tag or reference is malformed; the message shows the accepted forms."""


def check_name(value: str, what: str) -> str:
    """A model name or tag: letters, digits, '.', '_' and '-', so it fits URLs, paths and labels."""
    if not MODEL_NAME.fullmatch(value or ""):
        raise RefError(
            f"{what} {value!r} is not valid: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if what == "tag" and value == LATEST:
        raise RefError(f"tag {LATEST!r} is reserved: `NAME:{LATEST}` always means the newest version")
    return value


@dataclass(frozen=True)
class Ref:
    """One way of naming a version: by number, by tag, or the newest."""

    model: str
    number: int | None = None
    tag: str | None = None

    def __str__(self) -> str:
        if self.tag is not None:
            return f"{self.model}@{self.tag}"
        return f"{self.model}:{LATEST if self.number is None else self.number}"


def parse_ref(text: str) -> Ref:
    """`digits:3`, `digits:latest` or `digits@champion`."""
    usage = "use NAME:NUMBER (digits:3), NAME:latest or NAME@TAG (digits@champion)"
    if "@" in text:
        model, _, tag = text.partition("@")
        try:
            return Ref(check_name(model, "model name"), tag=check_name(tag, "tag"))
        except RefError as err:
            raise RefError(f"bad reference {text!r}: {err}; {usage}") from err
    model, sep, number = text.partition(":")
    if not sep:
        raise RefError(f"bad reference {text!r}: {usage}")
    try:
        check_name(model, "model name")
    except RefError as err:
        raise RefError(f"bad reference {text!r}: {err}; {usage}") from err
    if number == LATEST:
        return Ref(model)
    if not number.isdigit() or int(number) < 1:
        raise RefError(f"bad reference {text!r}: the version must be a number from 1 up or '{LATEST}'; {usage}")
    return Ref(model, number=int(number))


def parse_tag_ref(text: str, model: str | None) -> tuple[str | None, str]:
    """`champion` or `digits@champion` -> (model or None, tag); `--model` fills in a bare tag's model."""
    if "@" in text:
        ref = parse_ref(text)  # checks the model name and the tag
        if model is not None and model != ref.model:
            raise RefError(f"{text!r} names model {ref.model!r} but --model says {model!r}; give one of them")
        return ref.model, text.partition("@")[2]
    return (check_name(model, "model name") if model is not None else None), check_name(text, "tag")
