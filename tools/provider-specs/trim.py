#!/usr/bin/env python3
"""Cuts a provider's full OpenAPI document down to the paths payoutd's adapters and simulators use.

The result keeps every component those paths reference, transitively, so it is a valid standalone
OpenAPI document that openapi-core can load; JSON with sorted keys, so a regeneration diffs cleanly.

    trim.py stripe   <full spec3.yaml|json>  > stripe.spec3.trimmed.json
    trim.py coinbase <full openapi.yaml>     > coinbase.openapi.trimmed.json
"""

import json
import sys

import yaml

# The paths each adapter calls and each simulator serves (templated as in the provider's spec).
PATHS = {
    "stripe": ["/v1/transfers", "/v1/transfers/{transfer}", "/v1/payouts", "/v1/payouts/{payout}", "/v1/balance"],
    "coinbase": ["/v2/transfers", "/v2/transfers/{transferId}", "/v2/accounts/{accountId}/balances/{asset}"],
}
# Top-level members kept as they are (extensions and tags say nothing about these paths).
KEPT_TOP_LEVEL = ("openapi", "info", "servers", "security", "jsonSchemaDialect")
REF_PREFIX = "#/components/"


def refs_in(node):
    """Every local `$ref` under `node`, as (section, name)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF_PREFIX):
            section, _, name = ref[len(REF_PREFIX):].partition("/")
            # JSON pointer escapes in component names.
            yield section, name.replace("~1", "/").replace("~0", "~")
        for value in node.values():
            yield from refs_in(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs_in(value)


def security_schemes_in(spec, paths):
    """The security scheme names the kept operations (or the document) require."""
    names = set()
    requirements = list(spec.get("security", []))
    for item in paths.values():
        for operation in item.values():
            if isinstance(operation, dict):
                requirements.extend(operation.get("security", []))
    for requirement in requirements:
        names.update(requirement)
    return names


def trim(provider, spec):
    missing = [p for p in PATHS[provider] if p not in spec.get("paths", {})]
    if missing:
        sys.exit(f"trim.py: {provider} spec lacks paths {missing}")
    paths = {p: spec["paths"][p] for p in PATHS[provider]}
    components = spec.get("components", {})
    kept = {}
    pending = list(refs_in(paths))
    for name in security_schemes_in(spec, paths):
        pending.append(("securitySchemes", name))
    while pending:
        section, name = pending.pop()
        if name in kept.get(section, {}):
            continue
        try:
            component = components[section][name]
        except KeyError:
            sys.exit(f"trim.py: {provider} spec references a missing component {section}/{name}")
        kept.setdefault(section, {})[name] = component
        pending.extend(refs_in(component))
    trimmed = {k: spec[k] for k in KEPT_TOP_LEVEL if k in spec}
    trimmed["paths"] = paths
    trimmed["components"] = kept
    return trimmed


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in PATHS:
        sys.exit(f"usage: trim.py {{{'|'.join(PATHS)}}} FULL_SPEC")
    with open(sys.argv[2], encoding="utf-8") as f:
        # YAML is a superset of JSON: one loader for both forms the providers publish.
        spec = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    json.dump(trim(sys.argv[1], spec), sys.stdout, indent=2, sort_keys=True, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
