"""Bad input generated: schemathesis (hypothesis underneath) fuzzes a real
`accelkit images serve` (uvicorn on 127.0.0.1, Milvus Lite, the real model) from the service's
own OpenAPI document. Every answer: not a 5xx, a status and content type the document lists, a
body that matches the document's schema for it, and every refusal of a request names the field
(or the body) it refuses. Bounded here (`MAX_EXAMPLES` per route); `benchmarks/reliability/fuzz_service.py`
runs longer and writes what it ran to benchmarks/results/."""

import base64
import re
import signal

import httpx
import pytest
from PIL import Image

from tests.support.service import AUTH, Server

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is in the test extra")
from hypothesis import HealthCheck, Phase, settings  # noqa: E402

from tests.support.service_fuzz import CHECKS, error_names_its_field, service_config  # noqa: E402

# one xdist worker runs this module (pyproject: --dist loadgroup), so its service starts once
pytestmark = pytest.mark.xdist_group("service-fuzz")

MAX_EXAMPLES = 12  # per route; the suite stays well under 90 s on a loaded 2-core machine


@pytest.fixture(scope="module")
def server(tmp_path_factory, onnx_path, photos):
    base = tmp_path_factory.mktemp("fuzz")
    allowed = base / "allowed"
    allowed.mkdir()
    Image.fromarray(photos["chelsea"]).resize((64, 48)).save(allowed / "cat.jpg")
    config = base / "service.yaml"
    config.write_text(service_config(base, onnx_path, allowed))
    srv = Server(config, base / "server.log").start()
    yield srv
    code = srv.stop()
    log = (base / "server.log").read_text()
    assert "Traceback" not in log and "internal error" not in log, log[-4000:]
    assert code == 128 + signal.SIGTERM, log[-2000:]  # after a graceful shutdown


@pytest.fixture(scope="module")
def api_schema(server):
    return schemathesis.openapi.from_url(server.url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_every_answer_is_documented_and_no_answer_is_a_500(case, server):
    response = case.call(base_url=server.url, headers=AUTH, timeout=120)
    case.validate_response(response, checks=CHECKS)
    error_names_its_field(case, response)


# -- the cases the fuzzer found, reduced ------------------------------------------------------


def test_a_method_a_route_does_not_take_is_a_405_with_allow(server):
    """Was a 405 without Allow (RFC 9110 requires it): the handler dropped the headers; and
    Starlette's Allow names the methods of the first route of a path only."""
    for method, path, allowed in (
        ("TRACE", "/health", {"GET"}),
        ("PUT", "/collections/images", {"GET", "DELETE"}),
        ("PATCH", "/search", {"POST"}),
    ):
        response = httpx.request(method, server.url + path, headers=AUTH)
        assert response.status_code == 405, (method, path, response.text)
        listed = set(response.headers["allow"].replace(" ", "").split(","))
        assert listed - {"HEAD"} == allowed, (path, listed)
        assert response.json()["error"]["code"] == "method_not_allowed"


def test_the_document_lists_every_answer_the_service_gives(server, api_schema):
    """Were undocumented: 400 (a collection name the service refuses), 404, 409, 413 and the rest
    of the error statuses, all in one shape that was not the documented 422 shape
    (HTTPValidationError); /metrics documented as JSON while it is text."""
    document = httpx.get(server.url + "/openapi.json").json()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for status in ("400", "401", "404", "409", "413", "422", "429", "503"):
                answer = operation["responses"][status]["content"]["application/json"]
                assert answer["schema"]["$ref"].endswith("/ErrorResponse"), (method, path)
    query = {p["name"] for p in document["paths"]["/items"]["get"].get("parameters", [])}
    assert {"ids", "collection"} <= query  # read by the route itself: once undocumented
    metrics = document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert set(metrics) == {"text/plain"}
    cases = [
        (api_schema["/collections/{name}"]["GET"], {"path_parameters": {"name": "nope_47"}}),
        (api_schema["/collections/create"]["POST"], {"body": {"name": "images", "dim": 1280}}),
        (api_schema["/search"]["POST"], {"body": {"vector": [0.0], "topk": 0}}),
        (api_schema["/delete"]["POST"], {"body": {}}),
        (api_schema["/metrics"]["GET"], {}),
    ]
    for operation, parts in cases:
        media = {"media_type": "application/json"} if "body" in parts else {}
        case = operation.Case(**parts, **media)
        response = case.call(base_url=server.url, headers=AUTH, timeout=60)
        case.validate_response(response, checks=CHECKS)
    name = document["paths"]["/collections/{name}"]["get"]["parameters"][0]["schema"]
    assert re.fullmatch(name["pattern"].strip("^$"), "images") and not re.fullmatch(
        name["pattern"].strip("^$"), "0"
    )


def test_refusals_name_the_fields_they_refuse(server):
    """Found by benchmarks/reliability/fuzz_service.py: "6 images in one request; the limit is 4" named no
    field (the images come from several), and an empty key given twice was ": given twice"."""
    image = base64.b64encode(b"not an image").decode()
    for path, body, fields in (
        ("/embed", {"images_base64": [image] * 3, "inputs": ["a.jpg"] * 2}, "images_base64"),
        ("/insert", {"images_base64": [image] * 5}, "images_base64"),
    ):
        response = httpx.post(server.url + path, headers=AUTH, json=body, timeout=60)
        error = response.json()["error"]
        assert response.status_code == 413 and fields in error["message"], error
        assert "server.max_items_per_request" in error["message"], error
    twice = httpx.post(
        server.url + "/search",
        headers={**AUTH, "Content-Type": "application/json"},
        content=b'{"": 1, "": 2}',
    )
    assert twice.status_code == 422 and twice.json()["error"]["message"].startswith("'': given")
    # found by the suite's fuzz run in a trial: an unknown query parameter with an empty name
    unknown = httpx.get(server.url + "/items?=1&ids=a", headers=AUTH, timeout=60)
    assert unknown.status_code == 422, unknown.text
    assert unknown.json()["error"]["message"].startswith("'': unknown parameter"), unknown.text
