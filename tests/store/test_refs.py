import pytest

from export.store.refs import Ref, RefError, parse_ref, parse_tag_ref


@pytest.mark.parametrize(
    "text, ref",
    [
        ("digits:3", Ref("digits", number=3)),
        ("digits:latest", Ref("digits")),
        ("digits@champion", Ref("digits", tag="champion")),
        ("my-model.v2@v1.0", Ref("my-model.v2", tag="v1.0")),
    ],
)
def test_refs_parse(text, ref):
    assert parse_ref(text) == ref
    assert str(parse_ref(text)) == text


@pytest.mark.parametrize(
    "text, message",
    [
        ("digits", "use NAME:NUMBER"),
        ("digits:0", "a number from 1 up"),
        ("digits:three", "a number from 1 up"),
        ("digits@", "tag '' is not valid"),
        ("digits@latest", "reserved"),
        (":3", "model name '' is not valid"),
        ("dig its:3", "model name 'dig its' is not valid"),
        ("a/b:1", "model name 'a/b' is not valid"),
    ],
)
def test_bad_refs_say_what_to_write(text, message):
    with pytest.raises(RefError, match=message):
        parse_ref(text)


def test_tag_refs_take_their_model_from_either_side():
    assert parse_tag_ref("champion", None) == (None, "champion")
    assert parse_tag_ref("champion", "digits") == ("digits", "champion")
    assert parse_tag_ref("digits@champion", None) == ("digits", "champion")
    with pytest.raises(RefError, match="names model 'digits' but --model says 'other'"):
        parse_tag_ref("digits@champion", "other")
