#!/usr/bin/env python3
"""Validates every object of rendered manifests against the Kubernetes schemas.

Usage: validate.py KUBE_VERSION FILE.yaml...

kubernetes-validate carries the schemas, so this works offline. Validation is strict
(unknown fields are errors). Kinds that are custom resources (the Prometheus Operator's
ServiceMonitor) have no bundled schema: they are listed in CUSTOM_KINDS and checked by
the wiring test instead; any other kind without a schema is an error.
"""

import sys

import kubernetes_validate
import yaml

CUSTOM_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    version, paths = argv[1], argv[2:]
    failures, checked = [], 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        if not docs:
            failures.append(f"{path}: no objects rendered")
        for doc in docs:
            kind = (doc.get("apiVersion"), doc.get("kind"))
            name = f"{path}: {kind[1]}/{doc.get('metadata', {}).get('name')}"
            if kind in CUSTOM_KINDS:
                continue
            try:
                kubernetes_validate.validate(doc, version, strict=True)
                checked += 1
            except kubernetes_validate.ValidationError as e:
                failures.append(f"{name}: {e.message} at {'.'.join(map(str, e.path))}")
            except kubernetes_validate.SchemaNotFoundError as e:
                failures.append(f"{name}: no schema for {kind} in Kubernetes {version}: {e}")
            except kubernetes_validate.InvalidSchemaError as e:
                failures.append(f"{name}: {e}")
    for failure in failures:
        print(f"INVALID {failure}", file=sys.stderr)
    print(f"kubernetes {version}: {checked} objects valid, {len(failures)} invalid")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
