"""The API's edges over real HTTP: tokens, bad uploads, bad fields, unknown ids, a fuzz run."""
from __future__ import annotations

import httpx
import pytest

from .conftest import TOKEN


def test_health_needs_no_token_and_the_schema_lists_the_routes(server):
    health = httpx.get(server.url + "/v1/health").json()
    assert health["status"] == "ok" and health["scheduler_alive"]
    paths = httpx.get(server.url + "/openapi.json").json()["paths"]
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/artifact",
            "/v1/health", "/v1/cluster", "/metrics"} <= set(paths)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token-0123456789"},
                                     {"Authorization": f"Basic {TOKEN}"},
                                     {"Authorization": f"Bearer {TOKEN}x"}])
def test_every_route_but_health_needs_the_token(server, onnx_models, headers):
    for method, path in [("GET", "/v1/jobs"), ("GET", "/v1/jobs/x"), ("DELETE", "/v1/jobs/x"),
                         ("GET", "/v1/jobs/x/artifact"), ("GET", "/v1/cluster"),
                         ("GET", "/metrics")]:
        r = httpx.request(method, server.url + path, headers=headers)
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["www-authenticate"] == "Bearer"
    with open(onnx_models["small24"], "rb") as f:
        r = httpx.post(server.url + "/v1/jobs", headers=headers, files={"model": f})
    assert r.status_code == 401
    assert httpx.get(server.url + "/v1/jobs", headers={"Authorization": f"Bearer {TOKEN}"}
                     ).status_code == 200


def _post(server, auth, content: bytes, name="m.onnx", **fields):
    return httpx.post(server.url + "/v1/jobs", headers=auth, data=fields,
                      files={"model": (name, content, "application/octet-stream")}, timeout=60)


def test_uploads_that_are_not_importable_onnx_are_refused_with_the_reason(server, auth,
                                                                          onnx_models):
    good = onnx_models["small24"].read_bytes()
    cases = {
        b"": "empty",
        b"name,value\n1,2\n": "not an ONNX model",
        good[: len(good) // 2]: "not an ONNX model",  # truncated
        b"\x80\x04\x95" + b"\x00" * 40: "not an ONNX model",  # a pickle's header
    }
    for content, reason in cases.items():
        r = _post(server, auth, content)
        assert r.status_code == 400 and reason in r.json()["detail"], r.text
    r = _post(server, auth, _unsupported_model())
    assert r.status_code == 400 and "no converter for: custom.ops::Frobnicate" in r.json()["detail"]
    assert not [j for j in httpx.get(server.url + "/v1/jobs", headers=auth).json()
                if j["name"] == "m"]  # nothing accepted


def _unsupported_model() -> bytes:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="custom.ops")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid("custom.ops", 1)])
    return model.SerializeToString()


def test_oversize_uploads_are_413_declared_or_chunked(server, auth):
    big = b"\x08" * int(3.5 * 2**20)  # the server takes 2 MiB
    r = _post(server, auth, big)
    assert r.status_code == 413 and "limit" in r.json()["detail"]

    def chunks():  # no Content-Length: counted as it arrives
        boundary = b"--xyz\r\n"
        yield boundary + b'Content-Disposition: form-data; name="model"; filename="m.onnx"\r\n\r\n'
        for _ in range(8):
            yield b"\x08" * 2**19
        yield b"\r\n--xyz--\r\n"

    r = httpx.post(server.url + "/v1/jobs", content=chunks(), timeout=60,
                   headers={**auth, "Content-Type": "multipart/form-data; boundary=xyz"})
    assert r.status_code == 413


def test_bad_fields_are_422_and_unknown_jobs_404(server, auth, onnx_models):
    good = onnx_models["small24"].read_bytes()
    for fields, where in [({"sla_ms": "-1"}, "sla_ms"), ({"sla_ms": "inf"}, "sla_ms"),
                          ({"trials": "many"}, "trials"), ({"trials": "-3"}, "trials"),
                          ({"hardware_free": "perhaps"}, "hardware_free")]:
        r = _post(server, auth, good, **fields)
        assert r.status_code == 422 and where in r.text, (fields, r.text)
    r = _post(server, auth, good, target="llvm:not-a-cpu")
    assert r.status_code == 422 and "LLVM knows no x86 CPU" in r.json()["detail"]
    r = _post(server, auth, good, target="cuda:sm_90")
    assert r.status_code == 422 and "hardware_free" in r.json()["detail"]
    r = httpx.post(server.url + "/v1/jobs", headers=auth, data={"trials": "4"})
    assert r.status_code == 422 and "model" in r.text
    for method, path in [("GET", "/v1/jobs/nope"), ("DELETE", "/v1/jobs/nope"),
                         ("GET", "/v1/jobs/nope/artifact"),
                         ("GET", "/v1/jobs/' OR 1=1 --")]:
        r = httpx.request(method, server.url + path, headers=auth)
        assert r.status_code == 404 and "no job" in r.json()["detail"], (path, r.text)


def test_a_fuzz_run_from_the_openapi_schema_finds_no_server_error(server, auth):
    import schemathesis
    from hypothesis import HealthCheck, settings
    from schemathesis.checks import not_a_server_error

    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    failures, calls = [], []
    for op in schema.get_all_operations():
        operation = op.ok()

        @settings(max_examples=25, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case):
            response = case.call(headers=auth, timeout=60)
            calls.append(response.status_code)
            try:
                case.validate_response(response, checks=[not_a_server_error])
            except Exception as err:  # collect them all, report at the end
                failures.append(f"{case.method} {case.path}: {err}")

        operation.as_strategy()  # fails here if the schema cannot be turned into cases
        from hypothesis import given

        given(case=operation.as_strategy())(check)()
    assert len(calls) >= 50
    assert not failures, failures[:5]
    assert all(code < 500 for code in calls)
