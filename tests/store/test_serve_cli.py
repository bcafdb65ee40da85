"""`python -m wrappers serve` on a version's folder: what would not serve is refused in one line, before MLServer starts."""

import pytest

from slipway.cli import run
from wrappers.cli import main


@pytest.fixture(autouse=True)
def no_server(monkeypatch):
    """A check that let a mistake through must fail here, not start MLServer."""

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("serve went on to start MLServer")

    monkeypatch.setattr("wrappers.cli.subprocess.Popen", refuse)


def serve(capsys, *args: str) -> tuple[int, str]:
    code = run(main, ["serve", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "settings, message",
    [
        (b'{"implementation": "wrappers.runtime.OnnxRuntime"}', 'names no model: it needs a "name"'),
        (b'["a list"]', 'names no model: it needs a "name"'),
        (b'{"name": ', "model-settings.json is not JSON (Expecting value at line 1, column 10)"),
        (b"\xff\xfe{}", "model-settings.json is not UTF-8 text (byte 0xff at line 1, column 1: invalid start byte)"),
    ],
)
def test_settings_that_name_no_model_are_one_line(settings, message, artifact_factory, capsys):
    folder = artifact_factory(1.0)
    (folder / "model-settings.json").write_bytes(settings)
    code, err = serve(capsys, "--model-dir", str(folder))
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.parametrize(
    "flag, value", [("--http-port", "70000"), ("--grpc-port", "0"), ("--metrics-port", "-1"), ("--http-port", "http")]
)
def test_a_port_outside_1_to_65535_is_refused(flag, value, artifact_factory, capsys):
    # 70000 would be bound as 70000 % 65536 while the banner said 70000
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--model-dir", str(artifact_factory(1.0)), flag, value])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and len(err.strip().splitlines()) == 1
    assert f"argument {flag}: " in err and "is not a port number: give 1-65535" in err, err
