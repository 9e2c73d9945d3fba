#!/usr/bin/env python3
"""Checks recorded provider exchanges against each provider's own published description.

Input: a JSON-lines file, one exchange a line:
    {"provider": "stripe"|"coinbase"|"bridge"|"circle", "method", "path" (with query),
     "headers": [[name, value], ...], "body": "...", "status": n|null, "response_body": "..."|null}

Stripe and Coinbase CDP: request (method, path, query, declared headers, body) and response (status,
body) with openapi-core against the trimmed specs beside this file. Circle publishes no OpenAPI
document but a generated SDK: the same checks against the operations and pydantic models of its
Python package `circle-developer-controlled-wallets`. Bridge publishes neither: reported, unchecked.

Prints one line per exchange and `checked=N failed=F skipped=S`; exits 1 on any failure.
"""

import inspect
import json
import re
import sys
import typing
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

HERE = Path(__file__).resolve().parent

# The spec each provider is checked against, and the host its server URL names (Coinbase's server
# URL carries the `/platform` base path, so request paths keep it).
OPENAPI_PROVIDERS = {
    "stripe": ("stripe.spec3.trimmed.json", "https://api.stripe.com"),
    "coinbase": ("coinbase.openapi.trimmed.json", "https://api.cdp.coinbase.com"),
}
NO_SPEC = {"bridge": "Bridge publishes no OpenAPI spec and no generated SDK (no published spec): not validated"}
# Requests to our simulators' own control endpoints: no provider describes them.
SIM_CONTROL_PREFIX = "/_sim/"
# Headers the recording keeps but no spec describes as parameters: transport, not API.
TRANSPORT_HEADERS = {"host", "accept", "content-length", "user-agent", "accept-encoding", "connection", "content-type"}
# Every simulator answer is JSON (provider-sim's `raw_response`).
RESPONSE_CONTENT_TYPE = "application/json"


class Failure(Exception):
    pass


def header(headers, name):
    return next((v for n, v in headers if n.lower() == name.lower()), None)


# ---------------------------------------------------------------- OpenAPI (Stripe, Coinbase CDP)


class Unverifiable(Exception):
    """The description cannot say whether this exchange is right: skipped, with the reason."""


def set_aside_undefined_styles(spec):
    """OpenAPI defines `style: deepObject` for objects only; Stripe also declares it on arrays
    (`expand`) and on anyOf(object, integer) (`created`), which openapi-core cannot read. Those
    parameters and body encodings are taken out of the in-memory spec, and a request that carries
    one is reported unverifiable instead of checked. Returns {(method, path): {names}}."""
    aside = {}
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if not isinstance(op, dict):
                continue
            names = aside.setdefault((method.upper(), path), set())
            kept = []
            for p in op.get("parameters", []):
                if p.get("style") == "deepObject" and p.get("schema", {}).get("type") != "object":
                    names.add(p["name"])
                else:
                    kept.append(p)
            if "parameters" in op:
                op["parameters"] = kept
            for media in op.get("requestBody", {}).get("content", {}).values():
                properties = media.get("schema", {}).get("properties", {})
                for name, enc in list(media.get("encoding", {}).items()):
                    if enc.get("style") == "deepObject" and properties.get(name, {}).get("type") != "object":
                        names.add(name)
                        del media["encoding"][name]
    return aside


def null_branch_for_nullable_unions(node):
    """OpenAPI 3.0.0 (Stripe's spec) says `nullable: true` lets the schema be null; openapi-core
    reads it as 3.0.3 does (only beside `type`), which would refuse the nulls Stripe sends for its
    expandable fields (`nullable` beside `anyOf`). Those unions get the null branch they mean."""
    if isinstance(node, dict):
        if node.get("nullable") and "type" not in node:
            for key in ("anyOf", "oneOf"):
                if key in node:
                    node[key] = node[key] + [{"type": "string", "nullable": True, "enum": [None]}]
        for value in node.values():
            null_branch_for_nullable_unions(value)
    elif isinstance(node, list):
        for value in node:
            null_branch_for_nullable_unions(value)


class OpenApiChecker:
    def __init__(self, provider):
        from openapi_core import OpenAPI
        from openapi_core.validation.request import validators as rq
        from openapi_core.validation.response import validators as rs

        file, self.host = OPENAPI_PROVIDERS[provider]
        self.spec_dict = json.loads((HERE / file).read_text(encoding="utf-8"))
        self.aside = set_aside_undefined_styles(self.spec_dict)
        if self.spec_dict["openapi"].startswith("3.0"):
            null_branch_for_nullable_unions(self.spec_dict)
        for (method, path), names in sorted(self.aside.items()):
            if names:
                print(f"note: {provider} {method} {path}: deepObject on non-object {sorted(names)} (undefined in OpenAPI) set aside; a request carrying them is skipped")
        self.openapi = OpenAPI.from_dict(self.spec_dict)
        v31 = self.spec_dict["openapi"].startswith("3.1")
        spec = self.openapi.spec
        # Security is left out on purpose: the recording drops the Authorization header (a secret);
        # the simulators check the bearer token themselves.
        def request_validators(**kw):
            return [
                (rq.V31RequestParametersValidator if v31 else rq.V30RequestParametersValidator)(spec, **kw),
                (rq.V31RequestBodyValidator if v31 else rq.V30RequestBodyValidator)(spec, **kw),
            ]

        response_cls = rs.V31ResponseDataValidator if v31 else rs.V30ResponseDataValidator
        # Judged by the spec as written. Fields the spec does not declare where it allows them are
        # a note, not a failure (`undeclared`).
        self.validators = request_validators()
        self.response_validator = response_cls(spec)
        self.server_path = urlsplit(self.spec_dict["servers"][0]["url"]).path.rstrip("/")

    def resolve(self, node):
        while isinstance(node, dict) and "$ref" in node:
            section, _, name = node["$ref"][len("#/components/"):].partition("/")
            node = self.spec_dict["components"][section][name]
        return node

    def declared_properties(self, schema):
        """Properties a schema declares, through $ref, allOf, anyOf and oneOf (None: it names none,
        so any key is as declared as another)."""
        schema = self.resolve(schema)
        if not isinstance(schema, dict):
            return None
        props = dict(schema.get("properties", {}))
        if isinstance(schema.get("additionalProperties"), dict) or schema.get("additionalProperties") is True:
            return None
        branches = [b for key in ("allOf", "anyOf", "oneOf") for b in schema.get(key, [])]
        for branch in branches:
            inner = self.declared_properties(branch)
            if inner is None and self.resolve(branch).get("type", "object") == "object" and not self.resolve(branch).get("enum"):
                return None
            props.update(inner or {})
        if not props and not branches:
            return None
        return props

    def undeclared(self, schema, data, at):
        """Keys in `data` that `schema` does not declare, recursively."""
        out = []
        if isinstance(data, list):
            items = [self.resolve(b).get("items") for b in [schema] + self.resolve(schema).get("allOf", []) + self.resolve(schema).get("anyOf", []) + self.resolve(schema).get("oneOf", [])]
            items = next((i for i in items if i), None)
            for n, item in enumerate(data):
                out += self.undeclared(items or {}, item, f"{at}{n}/") if items else []
            return out
        if not isinstance(data, dict):
            return out
        props = self.declared_properties(schema)
        if props is None:
            return out
        for key, value in data.items():
            if key not in props:
                out.append(f"{at}{key}")
            else:
                out += self.undeclared(props[key], value, f"{at}{key}/")
        return out

    def operation(self, method, path):
        """The spec's operation for a concrete path, and its path template."""
        local = path[len(self.server_path):] if path.startswith(self.server_path) else None
        if local is None:
            raise Failure(f"path {path} is outside the spec's server path {self.server_path or '/'}")
        for template, item in self.spec_dict["paths"].items():
            pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
            if re.match(pattern, local):
                op = item.get(method.lower())
                if op is None:
                    raise Failure(f"{method} {template}: the spec has no such operation")
                return template, op, item
        raise Failure(f"{local}: the spec has no such path")

    def check_query_and_headers(self, method, path, query, headers, op, item):
        """What openapi-core lets pass: query parameters and headers the spec does not declare."""
        declared = {(p.get("in"), p.get("name", "").lower()) for p in op.get("parameters", []) + item.get("parameters", []) if "$ref" not in p}
        for p in op.get("parameters", []) + item.get("parameters", []):
            if "$ref" in p:
                ref = self.spec_dict["components"]["parameters"][p["$ref"].rsplit("/", 1)[1]]
                declared.add((ref["in"], ref["name"].lower()))
        for name, _ in query:
            # Stripe's list filters are objects (`created[gte]`): the bracket key names the parameter.
            if ("query", name.split("[", 1)[0].lower()) not in declared:
                raise Failure(f"query parameter {name!r} is not declared for {method} {path}")
        for name, _ in headers:
            lname = name.lower()
            if lname in TRANSPORT_HEADERS or ("header", lname) in declared:
                continue
            if lname == "idempotency-key" and self.host == "https://api.stripe.com" and method == "POST":
                # Stripe documents Idempotency-Key on every POST in its API reference, not in spec3.
                continue
            if lname == "stripe-version" and self.host == "https://api.stripe.com":
                # Stripe documents Stripe-Version on every request in its API reference's
                # versioning section (docs.stripe.com/api/versioning), not in spec3.
                continue
            raise Failure(f"header {name!r} is not declared for {method} {path}")

    def check(self, ex):
        from openapi_core.testing import MockRequest, MockResponse

        split = urlsplit(ex["path"])
        query = parse_qsl(split.query, keep_blank_values=True)
        headers = ex["headers"]
        template, op, item = self.operation(ex["method"], split.path)
        aside = self.aside.get((ex["method"], template), set())
        carried = sorted({k.split("[", 1)[0] for k, _ in query + parse_qsl(ex["body"] if "urlencoded" in (header(headers, "content-type") or "") else "")} & aside)
        if carried:
            raise Unverifiable(f"carries {carried}, whose deepObject style on a non-object Stripe's spec leaves undefined")
        self.check_query_and_headers(ex["method"], split.path, query, headers, op, item)
        content_type = header(headers, "content-type") or "application/json"
        request = MockRequest(self.host, ex["method"], split.path, args=None, headers=dict(headers), data=ex["body"].encode(), content_type=content_type)
        # Repeated and bracketed query keys survive as a multi-dict, as a server would read them.
        from werkzeug.datastructures import ImmutableMultiDict

        request.parameters.query = ImmutableMultiDict(query)
        body_optional = not op.get("requestBody", {}).get("required", False)
        # Stripe declares an optional form body even on GETs; an empty one has nothing to check.
        validators = self.validators[:1] if not ex["body"] and body_optional else self.validators
        for validator in validators:
            errors = list(validator.iter_errors(request))
            if errors:
                raise Failure("request: " + "; ".join(describe(e) for e in errors))
        notes = []
        if ex["body"] and "json" in content_type:
            media = op["requestBody"]["content"].get(content_type.split(";")[0].strip(), {})
            notes += [f"request field {f} is not declared by the spec (it allows it)" for f in self.undeclared(media.get("schema", {}), json.loads(ex["body"]), "")]
        if ex["status"] is None:
            return f"request ok ({ex['method']} {template}); no answer was sent (connection dropped), response not checked" + note_text(notes)
        response = MockResponse(ex["response_body"].encode(), status_code=ex["status"], content_type=RESPONSE_CONTENT_TYPE)
        errors = list(self.response_validator.iter_errors(request, response))
        if errors:
            raise Failure(f"response {ex['status']}: " + "; ".join(describe(e) for e in errors))
        declared = op.get("responses", {}).get(str(ex["status"])) or op.get("responses", {}).get("default", {})
        declared = self.resolve(declared).get("content", {}).get(RESPONSE_CONTENT_TYPE, {}).get("schema", {})
        notes += [f"response field {f} is not declared by the spec (it allows it)" for f in self.undeclared(declared, json.loads(ex["response_body"]), "")]
        return f"request and response {ex['status']} ok ({ex['method']} {template})" + note_text(notes)


def note_text(notes):
    return "".join(f"\n       note: {n}" for n in notes)


def describe(error):
    """An openapi-core error with its schema errors, which hold the field and the rule."""
    # The top message quotes the whole value; the schema errors below name the field and the rule.
    parts = [str(error)[:160]]
    cause = error.__cause__
    while cause is not None:
        inner = getattr(cause, "schema_errors", None)
        if inner:
            for e in inner:
                where = "/".join(str(p) for p in e.absolute_path) or "(root)"
                parts.append(f"at {where}: {e.message[:300]}")
            break
        parts.append(str(cause)[:300])
        cause = cause.__cause__
    return " | ".join(parts)


# ---------------------------------------------------------------- Circle (its generated SDK)


class CircleChecker:
    """Circle's operations as its generated Python SDK sends and reads them: each `*_with_http_info`
    method's path, query names, body model and answer models per status, read from the SDK itself."""

    def __init__(self):
        import circle.web3.configurations as cfg
        import circle.web3.developer_controlled_wallets as dcw
        import pydantic

        self.pydantic = pydantic
        self.packages = [dcw, cfg]
        self.operations = []
        for package in self.packages:
            for api_name in dir(package):
                api = getattr(package, api_name)
                if not inspect.isclass(api) or not api_name.endswith("Api"):
                    continue
                for name, fn in inspect.getmembers(api, inspect.isfunction):
                    if name.endswith("_with_http_info"):
                        op = self.operation_of(package, fn)
                        if op:
                            self.operations.append(op)

    def operation_of(self, package, fn):
        fn = unwrap(fn)
        if fn is None:
            return None
        source = inspect.getsource(fn)
        call = re.search(r"call_api\(\s*'([^']+)',\s*'([A-Z]+)'", source)
        if not call:
            return None
        hints = typing.get_type_hints(fn, include_extras=True)
        query = dict((wire, py) for py, wire in re.findall(r"_params(?:\.get\()?\[?'(\w+)'[^\n]*\n(?:[^\n]*\n){0,4}?\s*_query_params\.append\(\('(\w+)'", source))
        responses = dict(re.findall(r"'(\d{3})': \"(\w+)\"", source))
        body = re.search(r"_body_params = _params\['(\w+)'\]", source)
        return {
            "path": call.group(1),
            "method": call.group(2),
            "pattern": "^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(call.group(1))) + "$",
            "hints": hints,
            "query": query,
            "body": body.group(1) if body else None,
            "responses": responses,
            "package": package,
            "name": fn.__name__.removesuffix("_with_http_info"),
        }

    def model(self, package, name):
        for p in [package] + self.packages:
            m = getattr(p.models, name, None) if hasattr(p, "models") else None
            m = m or getattr(p, name, None)
            if m is not None:
                return m
        raise Failure(f"the SDK names model {name} but has none")

    def validate_value(self, annotation, value, what):
        try:
            # Query and path values are strings on the wire; the SDK's types say what they must parse as.
            self.pydantic.TypeAdapter(annotation).validate_strings(value)
        except self.pydantic.ValidationError as e:
            raise Failure(f"{what}={value!r}: {short(e)}")

    def validate_json(self, model, text, what, notes):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise Failure(f"{what} is not JSON: {e}")
        try:
            model.model_validate(data, strict=False)
        except self.pydantic.ValidationError as e:
            raise Failure(f"{what} is not a {model.__name__}: {short(e)}")
        # Pydantic lets undeclared fields pass, as the SDK does when it reads an answer: a note.
        notes += [f"{what} field {f} is not declared by {model.__name__} (the SDK ignores it)" for f in undeclared_fields(model, data, "")]

    def check(self, ex):
        split = urlsplit(ex["path"])
        for op in self.operations:
            m = re.match(op["pattern"], split.path)
            if m and op["method"] == ex["method"]:
                break
        else:
            raise Failure(f"{ex['method']} {split.path}: Circle's SDK has no such operation")
        where = f"{op['method']} {op['path']} ({op['name']})"
        notes = []
        for py, value in m.groupdict().items():
            self.validate_value(op["hints"][py], value, f"path parameter {py}")
        for wire, value in parse_qsl(split.query, keep_blank_values=True):
            if wire not in op["query"]:
                raise Failure(f"query parameter {wire!r}: the SDK sends no such parameter for {where}")
            self.validate_value(op["hints"][op["query"][wire]], value, f"query parameter {wire}")
        request_id = header(ex["headers"], "x-request-id")
        if request_id is not None:
            self.validate_value(op["hints"]["x_request_id"], request_id, "header X-Request-Id")
        if op["body"]:
            if (header(ex["headers"], "content-type") or "").split(";")[0].strip() != "application/json":
                raise Failure(f"request Content-Type {header(ex['headers'], 'content-type')!r}, the SDK sends application/json")
            body_model = typing.get_args(op["hints"][op["body"]])[0]
            self.validate_json(body_model, ex["body"], "request body", notes)
        elif ex["body"]:
            raise Failure(f"request has a body; {where} takes none")
        if ex["status"] is None:
            return f"request ok ({where}); no answer was sent (connection dropped), response not checked" + note_text(notes)
        name = op["responses"].get(str(ex["status"]))
        if name is None:
            raise Failure(f"response {ex['status']}: the SDK knows only {sorted(op['responses'])} for {where}")
        self.validate_json(self.model(op["package"], name), ex["response_body"], f"response {ex['status']}", notes)
        return f"request and response {ex['status']} ok ({where}, {name})" + note_text(notes)


def unwrap(fn, depth=0):
    """The SDK's own method under its decorators (one of them keeps no `__wrapped__`)."""
    if depth > 5 or not callable(fn):
        return None
    try:
        if "call_api(" in inspect.getsource(fn):
            return fn
    except (OSError, TypeError):
        pass
    inner = [getattr(fn, "__wrapped__", None), getattr(fn, "raw_function", None)]
    inner += [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if callable(getattr(c, "cell_contents", None))]
    for candidate in inner:
        found = candidate is not None and unwrap(candidate, depth + 1)
        if found:
            return found
    return None


def short(error):
    return "; ".join(f"{'/'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in error.errors()[:10])


def undeclared_fields(model, data, at):
    """Keys in `data` the model (and its nested models) do not declare; pydantic ignores them."""
    import pydantic

    if not (inspect.isclass(model) and issubclass(model, pydantic.BaseModel)) or not isinstance(data, dict):
        return []
    fields = {(f.alias or n): f for n, f in model.model_fields.items()}
    out = []
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            if "additional_properties" not in model.model_fields:
                out.append(f"{at}{key}")
            continue
        for nested in models_in(field.annotation):
            items = value if isinstance(value, list) else [value]
            for item in items:
                out.extend(undeclared_fields(nested, item, f"{at}{key}."))
    return out


def models_in(annotation):
    import pydantic

    if inspect.isclass(annotation) and issubclass(annotation, pydantic.BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in models_in(a)]


# ---------------------------------------------------------------- main


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: validate.py EXCHANGES.jsonl")
    checkers = {}
    checked = failed = skipped = 0
    failures = []
    with open(sys.argv[1], encoding="utf-8") as f:
        exchanges = [json.loads(line) for line in f if line.strip()]
    for n, ex in enumerate(exchanges, 1):
        provider = ex["provider"]
        label = f"#{n} {provider} {ex['method']} {ex['path']} -> {ex['status']}"
        if ex["path"].startswith(SIM_CONTROL_PREFIX):
            skipped += 1
            print(f"SKIP {label}: a simulator control endpoint, not the provider's API")
            continue
        if provider in NO_SPEC:
            skipped += 1
            print(f"SKIP {label}: {NO_SPEC[provider]}")
            continue
        if provider not in checkers:
            checkers[provider] = CircleChecker() if provider == "circle" else OpenApiChecker(provider)
        checked += 1
        try:
            print(f"OK   {label}: {checkers[provider].check(ex)}")
        except Unverifiable as e:
            checked -= 1
            skipped += 1
            print(f"SKIP {label}: {e}")
        except Failure as e:
            failed += 1
            failures.append(f"{label}: {e}")
            print(f"FAIL {label}: {e}")
    if failures:
        print("\nfailures:")
        for line in failures:
            print(f"  {line}")
    print(f"checked={checked} failed={failed} skipped={skipped}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
