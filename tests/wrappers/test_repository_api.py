"""The model repository API (index, load, unload): closed unless opened, then loopback or bearer token only.

The decision (`slipway.repository_access`) is tested on its own with any peer address; real servers
then show it in front of MLServer's REST routes and both of its gRPC services. A caller from another
address is real too where this host has one: the server listens on every address, and the tests
call it at this host's own non-loopback address, which is the peer address the server then sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from slipway.local_server import LocalServer
from slipway.ports import free_port
from slipway.repository_access import (
    API_ENV,
    CLOSED,
    TOKEN_ENV,
    RepositoryAccess,
    grpc_peer_address,
    is_loopback,
)
from slipway.runtime_settings import SettingsError
from slipway.server_process import HOOK, HOOK_ENV
from tests.conftest import refused_at_load
from tests.graphs import matmul_graph
from tests.wrappers.folders import model_folder

TOKEN = "0123456789abcdef0123456789abcdef"
MODEL = "m"
DEPRECATED_SERVICE = "/inference.model_repository.ModelRepositoryService"
INFER_BODY = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1.0, 2.0, 3.0, 4.0]}]}


def _bearer(token: str = TOKEN) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


# -- the setting ---------------------------------------------------------------------------


def test_unset_the_api_is_closed_and_open_reads_the_token():
    assert RepositoryAccess.from_env({}).api == "closed"
    access = RepositoryAccess.from_env({API_ENV: "open", TOKEN_ENV: TOKEN})
    assert access.api == "open" and access.token.get_secret_value() == TOKEN
    assert TOKEN not in repr(access) and TOKEN not in str(access)
    assert RepositoryAccess.from_env({API_ENV: "open"}).token is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({API_ENV: "Open"}, f"{API_ENV}='Open' is not one of closed, open: set {API_ENV}=closed"),
        ({API_ENV: ""}, "is not one of closed, open"),
        ({API_ENV: "yes"}, "is not one of closed, open"),
        ({TOKEN_ENV: TOKEN}, f"{TOKEN_ENV} is set but {API_ENV} is closed, which admits no caller: set {API_ENV}=open"),
        ({API_ENV: "open", TOKEN_ENV: ""}, "has 0 characters, fewer than 16"),
        ({API_ENV: "open", TOKEN_ENV: "short"}, "has 5 characters, fewer than 16"),
        ({API_ENV: "open", TOKEN_ENV: TOKEN + "\n"}, "whitespace or control characters (a Secret written from a file"),
    ],
)
def test_a_setting_that_is_not_valid_is_refused_naming_the_fix(env, message):
    with pytest.raises(SettingsError, match="^[^\n]*$") as caught:
        RepositoryAccess.from_env(env)
    assert message in str(caught.value)


# -- the decision ----------------------------------------------------------------------------


@pytest.mark.parametrize("peer", ["127.0.0.1", "10.1.2.3", "::1", None])
@pytest.mark.parametrize("headers", [[], _bearer()])
def test_closed_refuses_every_caller_and_says_how_to_open_it(peer, headers):
    refusal = RepositoryAccess(api="closed").refusal(peer, headers)
    assert refusal == CLOSED
    assert f"set {API_ENV}=open" in refusal and "--repository-api open --repository-token-secret NAME" in refusal
    assert "loopback callers and callers sending 'Authorization: Bearer <token>'" in refusal and TOKEN_ENV in refusal


@pytest.mark.parametrize("peer", ["127.0.0.1", "::1", "::ffff:127.0.0.1"])
def test_open_admits_loopback_callers(peer):
    assert is_loopback(peer)
    assert RepositoryAccess(api="open").refusal(peer, []) is None
    assert RepositoryAccess(api="open", token=TOKEN).refusal(peer, [("content-type", "application/json")]) is None


@pytest.mark.parametrize(
    "peer", ["10.1.2.3", "192.0.2.7", "fd00::2", "::ffff:10.0.0.1", "", None, "unix:/tmp/s", "127.0.0.6"]
)  # Istio's sidecar hands remote callers on from 127.0.0.6
def test_open_admits_other_callers_only_with_the_token(peer):
    access = RepositoryAccess(api="open", token=TOKEN)
    assert "admits only loopback callers and callers sending 'Authorization: Bearer <token>'" in access.refusal(peer, [])
    assert access.refusal(peer, _bearer()) is None
    assert access.refusal(peer, [("authorization", f"bearer   {TOKEN} ")]) is None  # the scheme in any case
    assert "does not match" in access.refusal(peer, _bearer(TOKEN[:-1] + "0"))
    assert "does not match" in access.refusal(peer, _bearer(TOKEN + "0"))
    no_token = RepositoryAccess(api="open").refusal(peer, [])
    assert f"admits only loopback callers in this server (it has no {TOKEN_ENV}" in no_token


def test_a_caller_that_sends_credentials_is_judged_on_them_even_from_loopback():
    access = RepositoryAccess(api="open", token=TOKEN)
    assert "does not match" in access.refusal("127.0.0.1", _bearer("f" * 32))
    assert access.refusal("127.0.0.1", _bearer()) is None
    assert "is not 'Bearer <token>'" in access.refusal("127.0.0.1", [("authorization", f"Basic {TOKEN}")])
    assert "is not 'Bearer <token>'" in access.refusal("10.1.2.3", [("authorization", "Bearer ")])
    assert "more than one Authorization header" in access.refusal("10.1.2.3", _bearer() + _bearer())
    assert "has no SLIPWAY_REPOSITORY_TOKEN to check" in RepositoryAccess(api="open").refusal("127.0.0.1", _bearer())


@pytest.mark.parametrize("header", ["x-forwarded-for", "Forwarded", "x-real-ip"])
def test_a_request_relayed_by_a_proxy_is_not_a_loopback_caller(header):
    relayed = [(header, "203.0.113.9")]
    assert "admits only loopback callers" in RepositoryAccess(api="open").refusal("127.0.0.1", relayed)
    assert RepositoryAccess(api="open", token=TOKEN).refusal("127.0.0.1", relayed + _bearer()) is None


@pytest.mark.parametrize(
    ("peer", "address"),
    [
        ("ipv4:127.0.0.1:50051", "127.0.0.1"),
        ("ipv6:[::1]:50051", "::1"),
        ("ipv6:%5B::1%5D:50051", "::1"),
        ("ipv4:10.0.0.7:1", "10.0.0.7"),
        ("unix:/tmp/grpc.sock", None),
        ("", None),
        (None, None),
    ],
)
def test_grpc_peer_strings_give_the_address(peer, address):
    assert grpc_peer_address(peer) == address


# -- real servers ----------------------------------------------------------------------------


def _post(base: str, path: str, headers: dict[str, str] | None = None, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body if body is not None else {}).encode()
    request = urllib.request.Request(
        f"{base}{path}", data=data, method="POST", headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as err:
        status, text = err.code, err.read()
    parsed = json.loads(text or b"null")
    return status, parsed


def _ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/v2/models/{MODEL}/ready", timeout=10) as response:
            return response.status == 200
    except urllib.error.HTTPError:
        return False


def _infers(base: str) -> bool:
    status, answer = _post(base, f"/v2/models/{MODEL}/infer", body=INFER_BODY)
    return status == 200 and answer["outputs"][0]["shape"] == [1, 3]


def _grpc_calls(target: str, metadata: list[tuple[str, str]] | None = None) -> dict[str, object]:
    """Each repository method of both gRPC services, called once: its response, or its status and details."""
    index = service_pb2.RepositoryIndexRequest()
    unload = service_pb2.RepositoryModelUnloadRequest(model_name=MODEL)
    load = service_pb2.RepositoryModelLoadRequest(model_name=MODEL)
    results: dict[str, object] = {}
    with grpc.insecure_channel(target) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for name, call, request in [
            ("index", stub.RepositoryIndex, index),
            ("unload", stub.RepositoryModelUnload, unload),
            ("load", stub.RepositoryModelLoad, load),
        ]:
            results[name] = _outcome(call, request, metadata)
        # MLServer's deprecated service: the same messages (same field numbers), called by its path
        for name, request in [("deprecated unload", unload), ("deprecated load", load)]:
            method = "RepositoryModelUnload" if "unload" in name else "RepositoryModelLoad"
            call = channel.unary_unary(
                f"{DEPRECATED_SERVICE}/{method}",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=lambda raw: raw,
            )
            results[name] = _outcome(call, request, metadata)
    return results


def _outcome(call, request, metadata) -> object:
    try:
        return call(request, metadata=metadata, timeout=30)
    except grpc.RpcError as err:
        return err.code(), err.details()


def _model_repository(tmp_path_factory) -> object:
    root = tmp_path_factory.mktemp("repository-api")
    model_folder(root, MODEL, matmul_graph(root / "m.onnx"))
    return root / MODEL


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return _model_repository(tmp_path_factory)


@pytest.fixture(scope="module")
def default_server(model_dir):
    """As `make serve` starts one, with nothing set: closed."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(API_ENV, raising=False)
        patch.delenv(TOKEN_ENV, raising=False)
        with LocalServer(model_dir) as server:
            yield server


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v2/repository/index"),
        ("POST", f"/v2/repository/models/{MODEL}/unload"),
        ("POST", f"/v2/repository/models/{MODEL}/load"),
        ("POST", f"/v2/repository/models/{MODEL}/unload/"),
        ("GET", "/v2/repository/index"),
        ("POST", "/v2/repository/models/other/unload"),
    ],
)
def test_a_closed_server_refuses_every_rest_repository_call_and_keeps_serving(default_server, method, path):
    for headers in ({}, {"Authorization": f"Bearer {TOKEN}"}):
        request = urllib.request.Request(
            f"{default_server.http_url}{path}", method=method, headers=headers, data=b"{}" if method == "POST" else None
        )
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=30)
        assert caught.value.code == 403
        assert json.loads(caught.value.read()) == {"error": CLOSED}
    assert _ready(default_server.http_url) and _infers(default_server.http_url)


@pytest.mark.slow
def test_a_closed_server_refuses_every_grpc_repository_call_and_keeps_serving(default_server):
    results = _grpc_calls(default_server.grpc_target)
    assert results == dict.fromkeys(results, (grpc.StatusCode.PERMISSION_DENIED, CLOSED))
    assert len(results) == 5
    assert _ready(default_server.http_url) and _infers(default_server.http_url)
    log = default_server.log_path.read_text()
    assert "model repository API (REST and gRPC): closed (every call refused)" in log
    assert "refused gRPC InferenceServicer.RepositoryModelUnload from ipv4:127.0.0.1:" in log


@pytest.mark.slow
def test_an_open_server_admits_loopback_callers_over_rest_and_grpc(model_dir):
    with LocalServer(model_dir, extra_env={API_ENV: "open"}) as server:
        base = server.http_url
        status, index = _post(base, "/v2/repository/index", body={"ready": True})
        assert status == 200 and [model["name"] for model in index] == [MODEL]
        assert _post(base, f"/v2/repository/models/{MODEL}/unload") == (200, None)
        assert not _ready(base)
        assert _post(base, f"/v2/repository/models/{MODEL}/load") == (200, None)
        assert _ready(base) and _infers(base)
        # a caller that sends a token is judged on it, and this server has none to check it against
        status, answer = _post(base, f"/v2/repository/models/{MODEL}/unload", {"Authorization": f"Bearer {TOKEN}"})
        assert status == 403 and "has no SLIPWAY_REPOSITORY_TOKEN to check a bearer token against" in answer["error"]
        results = _grpc_calls(server.grpc_target)
        assert [model.name for model in results["index"].models] == [MODEL]
        assert all(not isinstance(result, tuple) for result in results.values()), results
        assert _ready(base) and _infers(base)  # the last call loaded it again
        assert "model repository API (REST and gRPC): open to loopback callers only" in server.log_path.read_text()


@pytest.fixture(scope="module")
def token_server(model_dir):
    """Open with a token, on loopback like every server the tests start."""
    with LocalServer(model_dir, extra_env={API_ENV: "open", TOKEN_ENV: TOKEN}) as server:
        yield server


RELAYED = {"x-forwarded-for": "203.0.113.9"}  # a proxy's request: the caller it relays is not on loopback


@pytest.mark.slow
def test_a_token_server_admits_a_caller_from_elsewhere_only_with_the_token(token_server):
    """A request a proxy relays (X-Forwarded-For) is judged as its remote caller, so real requests over loopback
    take the path of a caller from another address."""
    base = token_server.http_url
    unload, load = f"/v2/repository/models/{MODEL}/unload", f"/v2/repository/models/{MODEL}/load"
    for headers in ({}, {"Authorization": f"Bearer {'f' * 32}"}, {"Authorization": TOKEN}):
        status, answer = _post(base, unload, {**RELAYED, **headers})
        assert status == 403, answer
    status, answer = _post(base, unload, RELAYED)
    assert "admits only loopback callers and callers sending 'Authorization: Bearer <token>'" in answer["error"]
    assert _ready(base) and _infers(base)
    assert _post(base, unload, {**RELAYED, "Authorization": f"Bearer {TOKEN}"}) == (200, None)
    assert not _ready(base)
    assert _post(base, load, {**RELAYED, "Authorization": f"Bearer {TOKEN}"}) == (200, None)
    assert _ready(base) and _infers(base)

    relayed = list(RELAYED.items())
    refused = _grpc_calls(token_server.grpc_target, metadata=relayed)
    assert {code for code, _ in refused.values()} == {grpc.StatusCode.PERMISSION_DENIED}
    assert len(refused) == 5
    wrong = _grpc_calls(token_server.grpc_target, metadata=[*relayed, ("authorization", f"Bearer {'f' * 32}")])
    assert {details for _, details in wrong.values()} == {
        f"the bearer token does not match {TOKEN_ENV} (the Secret named at render by --repository-token-secret)"
    }
    admitted = _grpc_calls(token_server.grpc_target, metadata=[*relayed, ("authorization", f"Bearer {TOKEN}")])
    assert all(not isinstance(result, tuple) for result in admitted.values()), admitted
    assert _ready(base) and _infers(base)


@pytest.mark.slow
def test_a_token_server_refuses_a_wrong_token_from_loopback_too(token_server):
    base = token_server.http_url
    status, answer = _post(base, f"/v2/repository/models/{MODEL}/unload", {"Authorization": f"Bearer {'f' * 32}"})
    assert status == 403 and "does not match" in answer["error"]
    wrong = _grpc_calls(token_server.grpc_target, metadata=[("authorization", f"Bearer {'f' * 32}")])
    assert {code for code, _ in wrong.values()} == {grpc.StatusCode.PERMISSION_DENIED}
    assert _ready(base) and _infers(base)
    status, _ = _post(base, "/v2/repository/index", {"X-Forwarded-For": "203.0.113.9"})
    assert status == 403  # relayed by a proxy: not a loopback caller
    assert _post(base, "/v2/repository/index")[0] == 200  # loopback, no credentials
    assert "open to loopback callers and bearer-token holders" in token_server.log_path.read_text()


@pytest.mark.slow
def test_a_server_with_a_setting_that_is_not_valid_refuses_to_start(model_dir):
    refused_at_load(model_dir, f"{API_ENV}='yes' is not one of closed, open", extra_env={API_ENV: "yes"})


@pytest.mark.slow
def test_the_launcher_refuses_to_serve_without_the_guard(model_dir):
    plain = {HOOK_ENV: "mlserver.repository.repository.SchemalessModelRepository"}
    refused_at_load(
        model_dir,
        f"{HOOK_ENV}=mlserver.repository.repository.SchemalessModelRepository: Slipway serves models through {HOOK}",
        extra_env=plain,
    )


@pytest.mark.slow
def test_our_runtime_does_not_load_in_a_server_mlserver_start_began(model_dir, tmp_path):
    """`mlserver start` hands Slipway neither its REST app nor its gRPC server, nor guards the repository API
    unless told to: the model refuses to load, naming the launcher (MLServer then stops, with status 0)."""
    from slipway.server_process import server_env

    env = server_env(
        host="127.0.0.1",
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        parallel_workers=0,
        metrics_dir=tmp_path,
    )
    done = subprocess.run(
        [sys.executable, "-m", "mlserver.cli.main", "start", str(model_dir)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        "this server was started by `mlserver start`, which hands Slipway neither its REST app nor its gRPC "
        "server" in done.stdout + done.stderr
    ), (done.stdout + done.stderr)[-3000:]
    assert "start it with `python -m wrappers.launch FOLDER`" in done.stdout + done.stderr


def test_every_server_wrappers_starts_is_guarded():
    from slipway.server_process import server_env

    env = server_env(host="127.0.0.1", http_port=1, grpc_port=2, metrics_port=3, parallel_workers=0, metrics_dir=".")
    assert env[HOOK_ENV] == HOOK
    assert env.get(API_ENV) == os.environ.get(API_ENV)  # the user's own setting, or none: closed


@pytest.mark.slow
def test_with_worker_processes_the_server_itself_is_still_guarded(model_dir):
    """The model loads in a worker process, the repository API is answered by the server's own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(API_ENV, raising=False)
        patch.delenv(TOKEN_ENV, raising=False)
        with LocalServer(model_dir, parallel_workers=1) as server:
            assert _post(server.http_url, f"/v2/repository/models/{MODEL}/unload") == (403, {"error": CLOSED})
            results = _grpc_calls(server.grpc_target)
            assert results == dict.fromkeys(results, (grpc.StatusCode.PERMISSION_DENIED, CLOSED))
            assert _ready(server.http_url) and _infers(server.http_url)


DOCS_PATHS = [
    "/v2/docs",
    "/v2/docs/dataplane.json",
    f"/v2/models/{MODEL}/docs",
    f"/v2/models/{MODEL}/docs/dataplane.json",
    f"/v2/models/{MODEL}/versions/1/docs",
]


@pytest.mark.parametrize("path", [*DOCS_PATHS, "/v2/docs/"])
def test_the_api_docs_paths_are_recognised_and_the_v2_routes_are_not(path):
    from wrappers.transport.api_docs import is_docs_path, served

    assert is_docs_path(path)
    for other in ("/v2", "/v2/models/m/infer", "/v2/models/docs/ready", "/v2/health/live", "/docs"):
        assert not is_docs_path(other)
    assert not served({}) and served({"SLIPWAY_API_DOCS": "1"}) and not served({"SLIPWAY_API_DOCS": "0"})


@pytest.mark.slow
def test_a_server_answers_its_api_docs_404_saying_how_to_turn_them_on_and_keeps_serving(default_server):
    from wrappers.transport.api_docs import DOCS_ENV

    for path in DOCS_PATHS:
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(f"{default_server.http_url}{path}", timeout=30)
        assert caught.value.code == 404 and f"set {DOCS_ENV}=1" in json.loads(caught.value.read())["error"]
    assert _ready(default_server.http_url) and _infers(default_server.http_url)


@pytest.mark.slow
def test_a_development_server_serves_the_api_docs_when_asked(model_dir):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLIPWAY_API_DOCS", "1")
        with LocalServer(model_dir) as server:
            with urllib.request.urlopen(f"{server.http_url}/v2/docs/dataplane.json", timeout=30) as response:
                assert response.status == 200 and "openapi" in json.loads(response.read())
