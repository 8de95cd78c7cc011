"""What a fuzzed answer of `accelkit images serve` must be (the suite's short fuzz,
tests/images/service/test_service_fuzz.py, and the long one, benchmarks/reliability/fuzz_service.py):
schemathesis' conformance checks and every refusal naming its field; and the service config both
fuzz. Needs schemathesis (the test extra)."""

from __future__ import annotations

import re

from schemathesis import checks

from tests.support.service import KEY

# refusals of a request that must name what they refuse (401, 404 of a route, 405, 429, 503 are
# about the caller or the service, not a field)
FIELD_ERRORS = {
    "invalid_field",
    "invalid_request",
    "invalid_filter",
    "invalid_data",
    "too_many_items",
}


def service_config(base, onnx_path, allowed) -> str:
    return (
        f"preprocess:\n  cache_compiled: false\n  batch_size: 8\n"
        f"model:\n  onnx_path: {onnx_path}\n"
        f"store:\n  uri: {base / 'images.db'}\n"
        f"server:\n  api_key: {KEY}\n  allowed_roots: [{allowed}]\n  max_body_bytes: 2000000\n"
        f"  max_concurrency: 2\n  max_queue: 16\n  batch_max_wait_ms: 5\n"
        f"  max_items_per_request: 4\n  max_ids_per_request: 64\n  max_topk: 50\n"
        f"log_level: WARNING\n"
    )


def field_names(case) -> set[str]:
    """Every field the operation's document names: body properties (and those of the models
    they refer to), parameters, and the body itself."""
    names = {"body", "request body", "form field", "files", "file"}
    document = case.operation.schema.raw_schema
    for model in document.get("components", {}).get("schemas", {}).values():
        names.update(model.get("properties", {}))
    names.update(p["name"] for p in case.operation.definition.raw.get("parameters", []))
    return names


def error_names_its_field(case, response) -> None:
    """A refusal of what the client sent says which field (or the body) is wrong."""
    if response.status_code not in (400, 413, 422):
        return
    error = response.json()["error"]
    assert set(error) <= {"status", "code", "message", "detail"}, error
    if error["code"] not in FIELD_ERRORS:
        return
    message = error["message"]
    named = {m for m in field_names(case) if re.search(rf"\b{re.escape(m)}\b", message)}
    named |= {key for key in sent_keys(case) if named_in(key, message)}
    assert named, (case.method, case.path, case.body, case.query, error)


def named_in(key: str, message: str) -> bool:
    """Whether `message` shows a key the request sent: as sent, quoted, escaped, or as a
    multipart client encodes a quote in a field name (%22)."""
    spellings = set()
    for sent in (key, key.replace('"', "%22")):
        spellings |= {sent[:40], repr(sent[:40]), repr(sent)[1:-1][:40]}
    return any(spelling and spelling in message for spelling in spellings)


def sent_keys(case) -> set[str]:
    """The keys the request sent, at every depth of its JSON body, and its query parameters."""
    keys, pending = set(case.query or {}), [case.body]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            keys.update(str(k) for k in value)
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return keys


CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
]
