"""Every extension point Slipway has into MLServer, checked against the installed MLServer in seconds.

No server starts: each check reads the target's shape (and, for the REST app, one MLServer builds and
never serves). Run against each supported MLServer release, this is what tells a maintainer which of
Slipway's fast paths a new release breaks. The checks run in their own process, as MLServer runs the
runtime: MLServer's V2 protobufs must not meet tritonclient's in the test process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from slipway.paths import PROJECT_ROOT
from wrappers.mlserver_compat import SUPPORTED_RELEASES, SUPPORTED_TEXT, mlserver_version

# One Python imports MLServer once (~2 s), then runs each check script in a fork of itself, one after another: a
# patch is process-wide, so each script gets a process of its own, without paying MLServer's import again. Each
# child's stdout and stderr go to files of its own, beside its exit status.
FORK_EACH = """
import json, os, sys
from wrappers.mlserver_compat import grpc_path, grpc_threads, model, rest_app, repository
out = sys.argv[1]
for job, (script, args) in json.loads(sys.stdin.read()).items():
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for fd, stream in ((1, "stdout"), (2, "stderr")):
            os.dup2(os.open(os.path.join(out, f"{job}.{stream}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.argv = ["-c", *args]
        status = 1
        try:
            exec(compile(script, "<" + job + ">", "exec"), {"__name__": "__main__"})
            status = 0
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    _, code = os.waitpid(pid, 0)
    with open(os.path.join(out, f"{job}.status"), "w") as status_file:
        status_file.write(str(os.waitstatus_to_exitcode(code)))
"""


def _run_each(jobs: dict[str, tuple[str, list[str]]], out: Path) -> dict[str, dict]:
    """Run each job's script (with its arguments) in its own fork of one MLServer-importing Python (FORK_EACH); by
    job, its exit status, stdout and stderr. A script that failed fails only its own test (`_last_json`)."""
    done = subprocess.run(
        [sys.executable, "-c", FORK_EACH, str(out)],
        input=json.dumps(jobs),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {
        job: {
            "status": int((out / f"{job}.status").read_text()),
            **{stream: (out / f"{job}.{stream}").read_text() for stream in ("stdout", "stderr")},
        }
        for job in jobs
    }


def _last_json(found: dict) -> dict:
    """The job's last line of output, as JSON, once it exited 0."""
    assert found["status"] == 0, found["stderr"][-3000:]
    return json.loads(found["stdout"].strip().splitlines()[-1])


@pytest.fixture(scope="module")
def checks(tmp_path_factory) -> dict[str, dict]:
    """Every check below that runs on the installed MLServer, each in its own process (FORK_EACH), by job: the whole
    check (CHECK_ALL), the maintainer's command on it (COMMAND), each target taken away (MISSING), a fast path's
    fallback (FALLBACK), a model's load on a moved target with and without `fast_path_fallback` (LOAD)."""
    from slipway.artifact import SETTINGS_FILE
    from tests.graphs import matmul_graph
    from tests.wrappers.folders import model_folder

    root = tmp_path_factory.mktemp("mlserver-compat")
    graph = matmul_graph(root / "m.onnx")
    loads = {
        f"load-{fallback}": (
            LOAD,
            [str(model_folder(root / str(fallback), "m", graph, extra={"fast_path_fallback": fallback}) / SETTINGS_FILE)],
        )
        for fallback in (False, True)
    }
    jobs = {
        "check-all": (CHECK_ALL, []),
        "command": (COMMAND, []),
        **{f"missing-{target}": (MISSING, [target]) for target in TARGETS},
        "fallback": (FALLBACK, []),
        "json-twice": (JSON_TWICE, []),
        **loads,
    }
    out = root / "out"
    out.mkdir()
    return _run_each(jobs, out)


CHECK_ALL = """
import json
from wrappers.mlserver_compat import check_all, mlserver_version
print(json.dumps({"version": mlserver_version(), "problems": check_all()}))
"""


def test_every_extension_point_is_where_slipway_expects_it_in_the_installed_mlserver(checks):
    found = _last_json(checks["check-all"])
    broken = {name: problem for name, problem in found["problems"].items() if problem is not None}
    assert not broken, f"MLServer {found['version']}: {broken}"
    assert len(found["problems"]) >= 15


def test_the_supported_release_is_the_one_pyproject_pins():
    from wrappers.mlserver_compat import PINNED, SUPPORTED_MLSERVER, SUPPORTED_TEXT

    extras = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = {requirement for extra in ("serve", "gpu") for requirement in extras[extra] if requirement.startswith("mlserver")}
    assert pins == {PINNED}
    assert PINNED == "mlserver==" + ".".join(map(str, SUPPORTED_MLSERVER)) + ".*"
    assert SUPPORTED_TEXT == ".".join(map(str, SUPPORTED_MLSERVER)) + ".x"


@pytest.fixture(scope="module")
def release_wheels() -> Path:
    """Each supported MLServer release unpacked (without its dependencies, which the venv has) under build/."""
    return PROJECT_ROOT / "build" / "mlserver-releases"


# `python -m wrappers.mlserver_compat` as a maintainer runs it on a release, in a fork of the MLServer process.
COMMAND = """
import runpy
runpy.run_module("wrappers.mlserver_compat", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("release", SUPPORTED_RELEASES)
def test_every_extension_point_is_where_slipway_expects_it_in_each_supported_release(release, release_wheels, checks):
    if release == mlserver_version():  # the venv's own release: checked in the process that imports it already
        found = checks["command"]
        stdout, stderr, returncode = found["stdout"], found["stderr"], found["status"]
    else:
        target = release_wheels / release
        if not (target / "mlserver").is_dir():
            staging = release_wheels / f".{release}.partial"
            shutil.rmtree(staging, ignore_errors=True)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--no-deps",
                    "--target",
                    str(staging),
                    f"mlserver=={release}",
                ],
                check=True,
                timeout=300,
            )
            staging.rename(target)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(PROJECT_ROOT)])}
        done = subprocess.run(
            [sys.executable, "-m", "wrappers.mlserver_compat"],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        stdout, stderr, returncode = done.stdout, done.stderr, done.returncode
    assert stdout.startswith(f"MLServer {release}: "), stdout + stderr[-2000:]
    assert returncode == 0, stdout
    assert "BROKEN" not in stdout


def test_the_supported_releases_are_every_release_of_the_pinned_range():
    assert all(release.startswith(SUPPORTED_TEXT.removesuffix("x")) for release in SUPPORTED_RELEASES)
    assert SUPPORTED_RELEASES[-1] == mlserver_version(), "the venv should hold the newest supported release"


# Each target taken away as a release that moved it would: the patch must fail in one line naming the symbol
# and the MLServer version, before anything is patched, never pass silently; and `check_all` (what
# `python -m wrappers.mlserver_compat` prints) must report its extension point broken.
MISSING = """
import json, sys
from wrappers.mlserver_compat import IncompatibleMLServer, mlserver_version
from wrappers.mlserver_compat import grpc_path, grpc_threads, model, rest_app, repository
target = sys.argv[1]

def grpc_converters():
    del grpc_path.converters.ModelInferRequestConverter.to_types
    from wrappers.transport import grpc_raw
    grpc_raw._install()

def grpc_servicer():
    grpc_path.servicers.InferenceServicer._GetReturnRaw = staticmethod(lambda message: False)
    from wrappers.transport import grpc_raw
    grpc_raw._install()

def request_json():
    del rest_app.requests.Request
    from wrappers.transport import rest_json
    rest_json.install()

def batching():
    del model.hooks._AdaptiveBatchingAttr
    model.uses_adaptive_batching(object())

def poller():
    import types, grpc._cython
    grpc._cython.cygrpc = types.SimpleNamespace()  # a grpc without the class (its Cython type cannot lose a method)
    grpc_threads.grpc_poller_threads()

def repository_methods():
    del repository.servicers.InferenceServicer.RepositoryModelLoad
    from wrappers import repository_api
    repository_api.install()

def version():
    import wrappers.mlserver_compat as compat
    compat.metadata.version = lambda name: "1.8.0"
    compat.check_version()

def server_start():
    import asyncio
    from wrappers.mlserver_compat import servers
    del servers.MLServer.start
    asyncio.run(servers.load_settings("."))

def grpc_interceptors():
    from wrappers.mlserver_compat import servers
    del servers.grpc_server.aio  # a module that builds its gRPC server some other way
    servers.check_grpc_interceptors()

def data_plane():
    import asyncio
    from wrappers.mlserver_compat import servers
    del servers.DataPlane.infer_stream
    asyncio.run(servers.load_settings("."))

def response_helpers():
    rest_app.insert_headers = None
    del rest_app.mlserver.utils.insert_headers
    from wrappers.transport import rest_infer
    rest_infer._install()

def json_encoder():
    rest_app.encode_json = None
    del rest_app.mlserver_json.encode_to_json_bytes
    from wrappers.transport import rest_infer
    rest_infer._install()

def request_json_cache():
    async def json(self):  # a Starlette whose requests cache the parsed body elsewhere
        return None
    rest_app.StarletteRequest.json = json
    from wrappers.transport import rest_json
    rest_json.install()

def running_handlers():
    import grpc
    del grpc.aio.Server.add_generic_rpc_handlers
    grpc_path.add_to_running_grpc_servers(object())

def rest_app_built():
    from fastapi import FastAPI
    def create_app(settings, data_plane, model_repository_handlers):  # an app without the infer route's path
        return FastAPI()
    rest_app.mlserver_app.create_app = create_app
    rest_app.check_rest_apps()

def router_layer():
    from starlette.routing import Router
    async def call(self, scope, receive, send):  # a router that answers without its middleware_stack
        return None
    Router.__call__ = call
    rest_app.wrap_router(rest_app.probe_app(), type("Layer", (), {}))

def infer_routes():
    from mlserver.rest import endpoints
    init = endpoints.Endpoints.__init__
    def init_renamed(self, data_plane):  # the endpoints keep their data plane under another name
        init(self, data_plane)
        self.data_plane = self.__dict__.pop("_data_plane")
    endpoints.Endpoints.__init__ = init_renamed
    rest_app.insert_infer_routes(rest_app.probe_app(), lambda mlserver_route, data_plane: None)

def repository_routes():
    create = rest_app.mlserver_app.create_app
    def create_app(settings, data_plane, model_repository_handlers):  # the repository API under another prefix
        app = create(settings, data_plane=data_plane, model_repository_handlers=model_repository_handlers)
        for route in app.routes:
            if getattr(route, "path", "").startswith(repository.REST_PREFIX):
                route.path = "/v3" + route.path.removeprefix("/v2")
        return app
    rest_app.mlserver_app.create_app = create_app
    repository.check_repository_routes(rest_app.probe_app())

def shared_ports():
    import uvicorn
    from wrappers.mlserver_compat import shared_ports
    del uvicorn.Server.startup
    shared_ports.share_uvicorn_ports()

def connection_limits():
    from uvicorn.protocols.http import httptools_impl
    from wrappers.mlserver_compat import connections
    from wrappers.limits.connection_rules import ConnectionLimits
    del httptools_impl.HttpToolsProtocol.on_headers_complete
    connections.limit_http_connections(ConnectionLimits())

def model_context():
    from mlserver import context
    del context.model_name_var
    from wrappers.operations import json_logs
    json_logs.JsonFormatter()

untouched = grpc_path.converters.ModelInferResponseConverter.from_types
try:
    globals()[target]()
except Exception as err:
    from wrappers.mlserver_compat import check_all
    print(json.dumps({"type": type(err).__name__, "message": str(err), "version": mlserver_version(),
                      "response_untouched": grpc_path.converters.ModelInferResponseConverter.from_types == untouched,
                      "broken": sorted(name for name, problem in check_all().items() if problem)}))
else:
    print(json.dumps({"type": None}))
"""


# Each take-away of MISSING: the extension point (a name of `extension_points()`) it breaks, the symbol the error names.
TARGETS = {
    "grpc_converters": ("gRPC raw converters", "mlserver.grpc.converters.ModelInferRequestConverter.to_types"),
    "grpc_servicer": ("gRPC raw converters", "mlserver.grpc.servicers.InferenceServicer._GetReturnRaw"),
    "running_handlers": ("gRPC handlers on the running server", "grpc.aio.Server.add_generic_rpc_handlers"),
    "request_json": ("REST request JSON parser", "mlserver.rest.requests.Request"),
    "request_json_cache": ("REST request JSON parser", "starlette.requests.Request._json"),
    "rest_app_built": ("REST app as MLServer builds it", "mlserver.rest.app.create_app"),
    "router_layer": ("REST router layer", "starlette.routing.Router.__call__"),
    "infer_routes": ("REST infer routes ahead of MLServer's", "mlserver.rest.endpoints.Endpoints._data_plane"),
    "batching": ("adaptive batching", "mlserver.batching.hooks._AdaptiveBatchingAttr"),
    "poller": ("gRPC poller thread", "grpc._cython.cygrpc.PollerCompletionQueue"),
    "repository_methods": ("model repository guard", "mlserver.grpc.servicers.InferenceServicer.RepositoryModelLoad"),
    "repository_routes": ("model repository routes", "mlserver.rest.endpoints.ModelRepositoryEndpoints"),
    "version": ("mlserver version", "mlserver"),
    "response_helpers": ("REST responses and headers", "mlserver.utils.insert_headers"),
    "json_encoder": ("REST responses and headers", "mlserver.codecs.json.encode_to_json_bytes"),
    "server_start": ("server built and started by the launcher", "mlserver.server.MLServer.start"),
    "data_plane": ("server built and started by the launcher", "mlserver.handlers.DataPlane.infer_stream"),
    "grpc_interceptors": ("gRPC server's first interceptor (the drain)", "mlserver.grpc.server.aio"),
    "shared_ports": ("ports shared by several front ends", "uvicorn.Server.startup"),
    "model_context": ("model context in log lines", "mlserver.context.model_name_var"),
    "connection_limits": (
        "HTTP connection limits",
        "uvicorn.protocols.http.httptools_impl.HttpToolsProtocol.on_headers_complete",
    ),
}


@pytest.mark.parametrize(("target", "point", "symbol"), [(target, *taken) for target, taken in TARGETS.items()])
def test_a_missing_target_fails_loudly_in_one_line_naming_it_and_the_mlserver_version(checks, target, point, symbol):
    found = _last_json(checks[f"missing-{target}"])
    assert found["type"] in ("IncompatibleMLServer", "RepositoryApiError"), found
    message = found["message"]
    assert "\n" not in message
    assert symbol in message and "pyproject pins mlserver==1.7.*" in message
    version = "1.8.0" if target == "version" else found["version"]
    assert re.search(rf"\bMLServer {re.escape(version)}\b", message), message
    assert found["response_untouched"], "a half-done patch: the check must come before anything is replaced"
    assert point in found["broken"], f"python -m wrappers.mlserver_compat misses the missing {symbol}: {found['broken']}"


def test_every_extension_point_is_taken_away_once_in_a_test(checks):
    points = set(_last_json(checks["check-all"])["problems"])
    untested = sorted(points - {point for point, _ in TARGETS.values()})
    assert not untested, f"take these extension points' targets away in MISSING and TARGETS: {untested}"
    assert {point for point, _ in TARGETS.values()} <= points, "TARGETS names an extension point that is gone"


# The REST parser as each model's load installs it, twice: the second install checks the request class the first one
# patched, and a request's body is parsed once, cached where Starlette's requests cache it.
JSON_TWICE = """
import asyncio, json
from mlserver.rest.requests import Request
from wrappers.transport import rest_json
from wrappers.mlserver_compat import check_all
rest_json.install()
rest_json.install()

async def main():
    async def receive():
        return {"type": "http.request", "body": b'{"inputs": []}', "more_body": False}
    request = Request({"type": "http", "method": "POST", "headers": []}, receive)
    return [await request.json(), await request.json(), request._json is await request.json()]

print(json.dumps({"answers": asyncio.run(main()), "broken": [name for name, problem in check_all().items() if problem]}))
"""


def test_the_rest_parser_installs_once_per_load_and_parses_a_body_once(checks):
    found = _last_json(checks["json-twice"])
    assert found["answers"] == [{"inputs": []}, {"inputs": []}, True]
    assert found["broken"] == []


# A model that lets its fast paths fall back loads without the one whose target is gone: an ERROR names it and
# the gauge says 0, while the others stay on.
FALLBACK = """
import json, logging
from prometheus_client import REGISTRY
from wrappers.transport import fast_paths, rest_json
from wrappers.mlserver_compat import rest_app
records = []
logging.getLogger("wrappers.transport.fast_paths").addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: records.append(r)})())
del rest_app.requests.Request
off = fast_paths.turn_on(fast_paths.REST_JSON, rest_json.install, fallback=True)
on = fast_paths.turn_on(fast_paths.REST_INFER, lambda: None, fallback=True)
print(json.dumps({"off": off, "on": on, "levels": [r.levelname for r in records], "message": records[0].getMessage(),
                  "json": REGISTRY.get_sample_value("slipway_fast_path_enabled", {"path": "rest_json"}),
                  "infer": REGISTRY.get_sample_value("slipway_fast_path_enabled", {"path": "rest_infer"})}))
"""


def test_with_fallback_a_missing_target_turns_only_its_fast_path_off_with_an_error_and_the_gauge_at_zero(checks):
    found = _last_json(checks["fallback"])
    assert found["off"] is False and found["on"] is True
    assert found["levels"] == ["ERROR"] and "mlserver.rest.requests.Request does not exist" in found["message"]
    assert found["json"] == 0.0 and found["infer"] == 1.0


# A real model's load, outside any server, on an MLServer whose request class lost what the REST parser swaps.
LOAD = """
import asyncio, json, sys
from mlserver.settings import ModelSettings
from prometheus_client import REGISTRY
from wrappers.mlserver_compat import rest_app
from wrappers.runtime import OnnxRuntime

async def main(path):
    del rest_app.requests.Request
    settings = ModelSettings.parse_file(path)
    settings._source = path
    try:
        await OnnxRuntime(settings).load()
    except Exception as err:
        print(json.dumps({"error": f"{type(err).__name__}: {err}"}))
        return
    value = lambda path: REGISTRY.get_sample_value("slipway_fast_path_enabled", {"path": path})
    print(json.dumps({"rest_json": value("rest_json"), "grpc_raw": value("grpc_raw"), "rest_infer": value("rest_infer")}))

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.parametrize("fallback", [False, True])
def test_a_model_fails_to_load_on_a_moved_target_unless_it_lets_that_fast_path_fall_back(checks, fallback):
    found = _last_json(checks[f"load-{fallback}"])
    if fallback:
        assert found == {"rest_json": 0.0, "grpc_raw": 1.0, "rest_infer": 1.0}
    else:
        assert found["error"].startswith("ModelLoadError: model m: MLServer 1.7")
        assert "mlserver.rest.requests.Request does not exist" in found["error"] and "\n" not in found["error"]
