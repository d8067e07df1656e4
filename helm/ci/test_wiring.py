#!/usr/bin/env python3
"""Checks that the objects of a rendered chart point at each other correctly.

Usage:
  test_wiring.py RENDERED.yaml --namespace NS [--gateways N] [--storage M]
                 [--existing-secret NAME] [--gateway-bin PATH] [--valkyrie-bin PATH]
                 [--nginx PATH] [--chart-values values.yaml --helm-args "-f FILE --set K=V"]

Schema validation says each object is well-formed; this says they fit together: Service
target ports exist on the pods they select, probes hit /_health on the admin port
(--admin-listen; HTTPS when the S3 port is, since it then serves the S3 certificate) and
the ServiceMonitor scrapes it (https, checked against the S3 Secret's ca.crt), the TLS flags are given
where the values turn TLS on and name files of Secrets mounted as folders, volume
mounts name volumes or claim templates, env entries name keys the Secret has, the
gateway gets the admin, metrics and catalog tokens (the narrow two not the admin one),
valkyrie gets the catalog token and never the admin token, the ServiceMonitor scrapes
with the metrics token (unless metrics_open is on), the gateway's --peers list names every replica through the headless Service with node ids
1..N, each storage node's nginx and valkyrie share one disk volume and agree on the disk
folder, and the gateway's config file lists every storage node in the pair its valkyrie
works for.

The container scripts are run for real (with /bin/sh, per pod ordinal) with stand-in
`gateway`, `valkyrie` and `mkdir` commands that record their arguments, so the checks see
the exact argv a pod would run. With --gateway-bin / --valkyrie-bin the real binaries are
asked too: the gateway must accept the rendered config file and flags (it gets as far as
probing the storage nodes, which do not exist here; a single node must serve /_metrics
and /_catalog/ to their own tokens only, over HTTPS with the chart's generated
certificate, and /_health on its admin listener, over HTTPS too when TLS is on, where plain
HTTP gets no answer, `gateway admin` with the S3 Secret's ca.crt as NOTES.txt runs it, and
the ServiceMonitor's scrape as Prometheus makes it), and valkyrie must know every flag.
With --nginx the rendered nginx.conf is started (paths moved into a temp folder) and must
take the gateway's WebDAV protocol: PUT into tmp/, MOVE to the content address, GET, DELETE
(over HTTPS with the client certificate, after refusing a client without one), and its
catalog proxy must carry /_catalog/ to a real HTTPS gateway.

With --chart-values (and --helm-args, the -f/--set arguments of the render) every setting
of SETTINGS is checked against the values: a set value must be in the config file under
its key, in its section, with its TOML type (and each valkyrie.* value a flag of the
storage nodes' valkyrie), a null or "" value must be absent. With --gateway-bin too,
`gateway config example` names the keys the binary knows: every key of the rendered file
must be one of them in its section (the [valkyrie] section ignores unknown keys, so only
this catches a misspelt one there), and every one of them must be a chart value of
SETTINGS or one the chart writes otherwise (CHART_WRITES_OTHERWISE), so a new gateway
setting without a chart value fails here.

With --existing-secret the chart renders no Secret: env entries must then name that
Secret and the keys helm/README.md documents for it.

Exit code 1 with every failed check listed; 0 when all pass.
"""

import argparse
import http.client
import os
import posixpath
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import tomllib
from base64 import b64decode

import yaml

GATEWAY_ENV = {
    "GATEWAY_ACCESS_KEY",
    "GATEWAY_SECRET_KEY",
    "GATEWAY_ADMIN_TOKEN",
    "GATEWAY_METRICS_TOKEN",
    "GATEWAY_CATALOG_TOKEN",
}
# The narrower tokens must not be the admin token (a storage node or a scraper holding
# admin rights is what they exist to avoid).
NARROW_TOKENS = ("GATEWAY_METRICS_TOKEN", "GATEWAY_CATALOG_TOKEN")
HEALTH_PATH = "/_health"
# The keys secret.existingSecret must have (helm/README.md).
EXISTING_SECRET_KEYS = {
    "access-key",
    "secret-key",
    "admin-token",
    "metrics-token",
    "catalog-token",
    "cluster-secret",
    "native-token",
}
# The gateway.toml settings that are chart values: (values path, section, key, kind). A
# kind is the TOML type the key must have; "switch" is on/off, given as a boolean or the
# string. None of these may be in the file when its value is null or "".
SETTINGS = [
    ("gateway.anyRegion", None, "any_region", "bool"),
    ("gateway.presignedV2ExpiresMaxSecs", None, "presigned_v2_expires_max_secs", "int"),
    ("gateway.choiceRoot", None, "choice_root", "int"),
    ("gateway.maxObjectBytes", None, "max_object_bytes", "int"),
    ("gateway.memoryStageBytes", None, "memory_stage_bytes", "int"),
    ("gateway.memoryReadBytes", None, "memory_read_bytes", "int"),
    ("gateway.requestLogLevel", None, "request_log_level", "str"),
    ("gateway.snapshotLogs", "cluster", "snapshot_logs", "int"),
    ("gateway.electionTimeoutMs", "cluster", "election_timeout_ms", "int"),
    ("gateway.replicationFactor", "cluster", "replication_factor", "int"),
    ("gateway.groupSplitFiles", "cluster", "group_split_files", "int"),
    ("gateway.groupSplitObjects", "cluster", "group_split_objects", "int"),
    ("gateway.groupSplitOps", "cluster", "group_split_ops", "int"),
    ("gateway.noRebalance", "cluster", "no_rebalance", "bool"),
    ("gateway.refDeadlineMs", "cluster", "ref_deadline_ms", "int"),
    ("gateway.reconcileGraceMs", "cluster", "reconcile_grace_ms", "int"),
    ("connections.headerReadTimeoutSecs", None, "header_read_timeout_secs", "int"),
    ("connections.keepaliveIdleSecs", None, "keepalive_idle_secs", "int"),
    ("connections.bodyIdleTimeoutSecs", None, "body_idle_timeout_secs", "int"),
    ("connections.sendTimeoutSecs", None, "send_timeout_secs", "int"),
    ("connections.max", None, "max_connections", "int"),
    ("lifecycle.daySecs", None, "lifecycle_day_secs", "int"),
    ("lifecycle.uploadMaxAgeSecs", None, "upload_max_age_secs", "int"),
    ("jobs.chunkKeys", None, "job_chunk_keys", "int"),
    ("jobs.pauseMs", None, "job_pause_ms", "int"),
    ("stats.scanSecs", None, "stats_scan_secs", "int"),
    ("integrity.sha1CollisionDetection", None, "sha1_collision_detection", "switch"),
    ("valkyrie.quarantineSecs", "valkyrie", "quarantine_secs", "int"),
    ("valkyrie.slaveDelaySecs", "valkyrie", "slave_delay_secs", "int"),
    ("valkyrie.scrubIntervalSecs", "valkyrie", "scrub_interval_secs", "int"),
    ("valkyrie.graceSecs", "valkyrie", "grace_secs", "int"),
    ("valkyrie.scrubBytesPerSec", "valkyrie", "scrub_bytes_per_sec", "int"),
    ("valkyrie.tempMaxAgeSecs", "valkyrie", "temp_max_age_secs", "int"),
    ("valkyrie.deletionIntervalSecs", "valkyrie", "deletion_interval_secs", "int"),
    ("valkyrie.deletionPageEntries", "valkyrie", "deletion_page_entries", "int"),
    ("valkyrie.scrubBatchFiles", "valkyrie", "scrub_batch_files", "int"),
]
# Keys of the gateway's config the chart fills without a value of SETTINGS: fixed by the
# pod (data, listen), from other values (region, domain, metrics.open, the pairs), or kept
# out of the file on purpose (tokens and the cluster secret come from the Secret as
# environment variables, node_id and peers are flags per pod ordinal).
# The admin listener and the certificates are flags (TLS_FLAGS), files of mounted Secrets.
CHART_WRITES_OTHERWISE = {
    None: {
        "data", "listen", "region", "domain", "metrics_open", "admin_token", "native_token",
        "metrics_token", "catalog_token", "cluster_secret", "admin_listen", "tls_cert", "tls_key",
    },
    "cluster": {"node_id", "peers", "cluster_secret", "cluster_ca", "cluster_cert", "cluster_key"},
    "pairs": {"id", "disks"},
    "storage_tls": {"ca", "cert", "key"},
}
# The gateway's certificate flags by what they secure (the Secret file names are
# cert-manager's: tls.crt, tls.key, ca.crt).
TLS_FLAGS = {
    "s3": ("--tls-cert", "--tls-key"),
    "cluster": ("--cluster-ca", "--cluster-cert", "--cluster-key"),
    "storage": ("--storage-ca", "--storage-cert", "--storage-key"),
}
# The CA file NOTES.txt gives `gateway admin --ca` inside a gateway pod: the S3 Secret's.
NOTES_ADMIN_CA = "/etc/tls/s3/ca.crt"
# Bounds on the processes this test starts.
SCRIPT_TIMEOUT_SECS = 10
BINARY_TIMEOUT_SECS = 60
NGINX_START_SECS = 10


class Checks:
    """Collects failures instead of stopping at the first, so one run lists them all."""

    def __init__(self):
        self.failures = []
        self.passed = 0

    def that(self, ok, message):
        if ok:
            self.passed += 1
        else:
            self.failures.append(message)
        return ok


class Rendered:
    """The rendered objects, by kind and name."""

    def __init__(self, path, namespace, existing_secret=None):
        with open(path, encoding="utf-8") as f:
            self.docs = [d for d in yaml.safe_load_all(f) if d]
        self.namespace = namespace
        self.existing_secret = existing_secret

    def of_kind(self, kind):
        return [d for d in self.docs if d.get("kind") == kind]

    def get(self, kind, name):
        for d in self.of_kind(kind):
            if d["metadata"]["name"] == name:
                return d
        return None

    def workloads(self):
        return self.of_kind("StatefulSet") + self.of_kind("Deployment")

    def selected_workloads(self, selector):
        """Workloads whose pod template carries every label of `selector`."""
        out = []
        for w in self.workloads():
            labels = w["spec"]["template"]["metadata"].get("labels", {})
            if selector and all(labels.get(k) == v for k, v in selector.items()):
                out.append(w)
        return out

    def secret_keys(self, name):
        if self.existing_secret:
            return EXISTING_SECRET_KEYS if name == self.existing_secret else None
        secret = self.get("Secret", name)
        if secret is None:
            return None
        return set(secret.get("data", {})) | set(secret.get("stringData", {}))

    def secret_value(self, name, key):
        secret = self.get("Secret", name)
        if secret is None:
            return None
        if key in secret.get("stringData", {}):
            return secret["stringData"][key]
        value = secret.get("data", {}).get(key)
        return None if value is None else b64decode(value).decode()

    def dns(self, service):
        return f"{service}.{self.namespace}.svc.cluster.local"


def containers(workload):
    return workload["spec"]["template"]["spec"]["containers"]


def container(workload, name):
    for c in containers(workload):
        if c["name"] == name:
            return c
    return None


def port_number(c, port):
    """A probe's or a targetPort's port (name or number) as a number, if the container has it."""
    for p in c.get("ports", []):
        if port in (p.get("name"), p["containerPort"]):
            return p["containerPort"]
    return None


def mount_of(c, volume):
    for m in c.get("volumeMounts", []):
        if m["name"] == volume:
            return m
    return None


def file_from_mount(rendered, workload, c, path):
    """The content of file `path` inside container `c`, when a ConfigMap volume provides it."""
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}
    for m in c.get("volumeMounts", []):
        v = volumes.get(m["name"], {})
        if "configMap" not in v:
            continue
        base = m["mountPath"].rstrip("/") + "/"
        if m.get("subPath"):
            key = m["subPath"] if path == m["mountPath"] else None
        else:
            key = path[len(base):] if path.startswith(base) else None
        cm = rendered.get("ConfigMap", v["configMap"]["name"])
        if key and cm and key in cm.get("data", {}):
            return cm["data"][key]
    return None


def secret_file(rendered, workload, c, path):
    """(Secret name, key, content or None) of file `path` in container `c` when a Secret
    volume mounted as a folder (not subPath: a rotated certificate must reach the pod)
    provides it; content is None for a Secret the chart does not render. None otherwise."""
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}
    for m in c.get("volumeMounts", []):
        v = volumes.get(m["name"], {})
        base = m["mountPath"].rstrip("/") + "/"
        if "secret" not in v or m.get("subPath") or not (path or "").startswith(base):
            continue
        key = path[len(base):]
        items = v["secret"].get("items")
        if items is not None:
            found = [i["key"] for i in items if i["path"] == key]
            if not found:
                continue
            key = found[0]
        name = v["secret"]["secretName"]
        return name, key, rendered.secret_value(name, key)
    return None


def run_script(c, hostname, workdir):
    """Runs a container's command for a pod named `hostname`; returns the argv it execs.

    PATH holds only stand-ins: `exec gateway ...` or `exec valkyrie ...` writes its argv
    (NUL-separated) and exits, `mkdir` does nothing, any other command is not found.
    """
    command = (c.get("command") or []) + (c.get("args") or [])
    if command[:2] != ["/bin/sh", "-c"]:
        return None, f"container {c['name']} does not start through /bin/sh -c: {command}"
    fake = os.path.join(workdir, "bin")
    os.makedirs(fake, exist_ok=True)
    out = os.path.join(workdir, "argv")
    for name in ("gateway", "valkyrie"):
        path = os.path.join(fake, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(f'#!/bin/sh\nprintf "%s\\0" {name} "$@" > "$ARGV_OUT"\n')
        os.chmod(path, 0o755)
    path = os.path.join(fake, "mkdir")
    with open(path, "w", encoding="utf-8") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(path, 0o755)
    if os.path.exists(out):
        os.remove(out)
    env = {"PATH": fake, "HOSTNAME": hostname, "ARGV_OUT": out}
    for e in c.get("env", []):
        env.setdefault(e["name"], e.get("value", "from-secret"))
    done = subprocess.run(
        ["/bin/sh", "-c", command[2]] + command[3:],
        env=env,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_SECS,
        check=False,
    )
    if done.returncode != 0 or not os.path.exists(out):
        return None, f"script of {c['name']} on {hostname} failed ({done.returncode}): {done.stderr.strip()}"
    with open(out, encoding="utf-8") as f:
        return f.read().rstrip("\0").split("\0"), None


def flag(argv, name):
    """The value of `--name VALUE` in argv, or None."""
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def check_services(r, t):
    for svc in r.of_kind("Service"):
        name = svc["metadata"]["name"]
        selected = r.selected_workloads(svc["spec"].get("selector", {}))
        if not t.that(selected, f"Service {name} selects no workload"):
            continue
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for w in selected:
                found = [port_number(c, target) for c in containers(w)]
                t.that(
                    any(n is not None for n in found),
                    f"Service {name} port {port['port']} targets {target!r}, "
                    f"which no container of {w['metadata']['name']} exposes",
                )


def check_pdbs(r, t):
    for pdb in r.of_kind("PodDisruptionBudget"):
        selector = pdb["spec"]["selector"]["matchLabels"]
        t.that(r.selected_workloads(selector), f"PodDisruptionBudget {pdb['metadata']['name']} selects no workload")


def check_volumes_and_env(r, t):
    for w in r.workloads():
        wname = w["metadata"]["name"]
        spec = w["spec"]["template"]["spec"]
        volumes = {v["name"] for v in spec.get("volumes", [])}
        claims = {c["metadata"]["name"] for c in w["spec"].get("volumeClaimTemplates", [])}
        t.that(not (volumes & claims), f"{wname}: volumes and claim templates share names {volumes & claims}")
        for v in spec.get("volumes", []):
            if "configMap" in v:
                t.that(r.get("ConfigMap", v["configMap"]["name"]), f"{wname}: volume {v['name']} names a missing ConfigMap")
            if "secret" in v:
                t.that(r.get("Secret", v["secret"]["secretName"]), f"{wname}: volume {v['name']} names a missing Secret")
        for c in containers(w):
            for m in c.get("volumeMounts", []):
                t.that(
                    m["name"] in volumes | claims,
                    f"{wname}/{c['name']}: mount {m['mountPath']} names volume {m['name']!r}, "
                    f"which is neither a volume nor a claim template ({sorted(volumes | claims)})",
                )
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if not ref:
                    continue
                keys = r.secret_keys(ref["name"])
                if t.that(keys is not None, f"{wname}/{c['name']}: env {e['name']} names missing Secret {ref['name']}"):
                    t.that(
                        ref["key"] in keys,
                        f"{wname}/{c['name']}: env {e['name']} names key {ref['key']!r}, "
                        f"not in Secret {ref['name']} ({sorted(keys)})",
                    )


def env_ref(c, name):
    for e in c.get("env", []):
        if e["name"] == name:
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            return (ref["name"], ref["key"]) if ref else ("value", e.get("value"))
    return None


def component(r, name):
    found = [w for w in r.workloads() if w["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == name]
    return found[0] if len(found) == 1 else None


def headless_service(r, w):
    """The governing Service of a StatefulSet, if it exists, is headless and selects it."""
    svc = r.get("Service", w["spec"].get("serviceName", ""))
    if svc is None or svc["spec"].get("clusterIP") != "None":
        return None
    if w not in r.selected_workloads(svc["spec"].get("selector", {})):
        return None
    return svc


def check_gateway(r, t, expect, work):
    """Probes, env, the config file, --node-id and --peers. Returns what later checks need."""
    gw = component(r, "gateway")
    if not t.that(gw is not None, "exactly one gateway workload"):
        return None
    name = gw["metadata"]["name"]
    replicas = gw["spec"]["replicas"]
    if expect is not None:
        t.that(replicas == expect, f"gateway replicas {replicas}, expected {expect}")
    c = container(gw, "gateway")
    if not t.that(c is not None, f"{name} has a container named gateway"):
        return None
    s3_port = port_number(c, "s3")
    t.that(s3_port is not None, f"{name}: the gateway container has no port named s3")
    admin_port = port_number(c, "admin")
    t.that(admin_port is not None, f"{name}: the gateway container has no port named admin")
    # Probes go to the admin listener (its own connection bound), so a flood of S3
    # connections does not get a healthy gateway restarted.
    for probe in ("livenessProbe", "readinessProbe"):
        get = c.get(probe, {}).get("httpGet", {})
        t.that(get.get("path") == HEALTH_PATH, f"{name}: {probe} path is {get.get('path')!r}, not {HEALTH_PATH}")
        t.that(
            admin_port is not None and port_number(c, get.get("port")) == admin_port,
            f"{name}: {probe} port {get.get('port')!r} is not the admin port {admin_port}",
        )
    required = set(GATEWAY_ENV) | ({"GATEWAY_CLUSTER_SECRET"} if replicas > 1 else set())
    for env in sorted(required):
        ref = env_ref(c, env)
        t.that(ref is not None and ref[0] != "value", f"{name}: env {env} is not taken from a Secret")
    admin = env_ref(c, "GATEWAY_ADMIN_TOKEN")
    for env in NARROW_TOKENS:
        ref = env_ref(c, env)
        t.that(ref is None or ref != admin, f"{name}: env {env} is the admin token {admin}")
        value = r.secret_value(*ref) if ref and ref[0] != "value" else None
        admin_value = r.secret_value(*admin) if admin and admin[0] != "value" else None
        t.that(value is None or value != admin_value, f"{name}: {env} has the admin token's value")
    if replicas > 1:
        ref = env_ref(c, "GATEWAY_CLUSTER_SECRET")
        if ref and ref[0] != "value":
            secret = r.secret_value(*ref)
            t.that(secret is None or len(secret) >= 16, f"{name}: the cluster secret is shorter than 16 characters")

    headless = headless_service(r, gw)
    t.that(headless is not None, f"{name}: serviceName {gw['spec'].get('serviceName')!r} is not a headless Service selecting it")
    if headless is not None:
        t.that(
            headless["spec"].get("publishNotReadyAddresses") is True,
            f"{headless['metadata']['name']}: peers must resolve before they are ready (publishNotReadyAddresses)",
        )
        t.that(
            any(port_number(c, p.get("targetPort", p["port"])) == s3_port for p in headless["spec"]["ports"]),
            f"{headless['metadata']['name']}: no port reaches the S3 port {s3_port}",
        )

    runs = []
    for ordinal in range(replicas):
        argv, err = run_script(c, f"{name}-{ordinal}", work)
        if not t.that(argv is not None, err):
            continue
        runs.append((ordinal, argv))
    # With --tls-cert the admin listener serves HTTPS (the S3 certificate) and refuses plain
    # HTTP: a plain-HTTP probe would fail on a healthy gateway. The kubelet does not verify
    # the certificate.
    s3_tls = any(flag(argv, "--tls-cert") is not None for _, argv in runs)
    scheme = "HTTPS" if s3_tls else "HTTP"
    for probe in ("livenessProbe", "readinessProbe"):
        got = c.get(probe, {}).get("httpGet", {}).get("scheme", "HTTP")
        t.that(
            got == scheme,
            f"{name}: {probe} scheme {got}, but the admin listener is {scheme} (--tls-cert given: {s3_tls})",
        )
    config, config_text = None, None
    for ordinal, argv in runs:
        t.that(argv[:2] == ["gateway", "serve"], f"{name}-{ordinal} runs {argv[:2]}, not gateway serve")
        config_path = flag(argv, "--config")
        text = file_from_mount(r, gw, c, config_path or "")
        if not t.that(text is not None, f"{name}-{ordinal}: --config {config_path!r} is not a mounted ConfigMap key"):
            continue
        try:
            config = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            t.that(False, f"{name}: {config_path} is not valid TOML: {e}")
            continue
        config_text = text
        listen = config.get("listen", "")
        t.that(
            listen.rsplit(":", 1)[-1] == str(s3_port),
            f"{name}: config listen {listen!r} is not on the container's S3 port {s3_port}",
        )
        data = config.get("data")
        mounts = [m for m in c.get("volumeMounts", []) if m["mountPath"] == data]
        claims = {v["metadata"]["name"] for v in gw["spec"].get("volumeClaimTemplates", [])}
        t.that(
            mounts and mounts[0]["name"] in claims,
            f"{name}: the data folder {data!r} is not a mounted claim template ({claims})",
        )
        admin_listen = flag(argv, "--admin-listen") or ""
        t.that(
            admin_listen.rsplit(":", 1)[-1] == str(admin_port),
            f"{name}-{ordinal}: --admin-listen {admin_listen!r} is not on the container's admin port {admin_port}",
        )
        for group, flags in TLS_FLAGS.items():
            given = [f for f in flags if flag(argv, f) is not None]
            t.that(given in ([], list(flags)), f"{name}-{ordinal}: {group} TLS flags {given}: all of {flags} or none")
            for f in given:
                found = secret_file(r, gw, c, flag(argv, f))
                t.that(
                    found is not None and (found[2] is not None or r.get("Secret", found[0]) is None),
                    f"{name}-{ordinal}: {f} {flag(argv, f)} is not a key of a Secret mounted as a folder ({found})",
                )
        node_id, peers = flag(argv, "--node-id"), flag(argv, "--peers")
        if replicas == 1:
            t.that(node_id is None and peers is None, f"{name}: one replica must run without --node-id/--peers")
            continue
        t.that(node_id == str(ordinal + 1), f"{name}-{ordinal}: --node-id {node_id}, expected {ordinal + 1}")
        if not t.that(peers is not None, f"{name}-{ordinal}: no --peers"):
            continue
        entries = [p.split("=", 1) for p in peers.split(",")]
        ids = [int(i) for i, _ in entries]
        t.that(ids == list(range(1, replicas + 1)), f"{name}: --peers ids {ids}, expected 1..{replicas}")
        if headless is not None:
            want = [
                f"{name}-{i}.{r.dns(headless['metadata']['name'])}:{s3_port}" for i in range(replicas)
            ]
            got = [addr for _, addr in entries]
            t.that(got == want, f"{name}: --peers addresses {got}, expected {want}")
    return {
        "workload": gw,
        "config": config,
        "config_text": config_text,
        "runs": runs,
        "s3_port": s3_port,
        "admin_port": admin_port,
        "s3_tls": s3_tls,
    }


def nginx_conf_facts(text):
    """root, listen port, body temp path and the dav locations of our nginx.conf."""
    root = re.search(r"^\s*root\s+(\S+);", text, re.M)
    listen = re.search(r"^\s*listen\s+(\d+)(?:\s+ssl)?;", text, re.M)
    body = re.search(r"^\s*client_body_temp_path\s+(\S+);", text, re.M)
    dav = re.findall(r"location\s+(/[^\s{]*)\s*\{[^}]*dav_methods\s+([^;]+);", text)
    return {
        "root": root.group(1) if root else None,
        "listen": int(listen.group(1)) if listen else None,
        "ssl": bool(listen and re.search(r"\sssl;", listen.group(0))),
        "verify_client": re.search(r"^\s*ssl_verify_client\s+on;", text, re.M) is not None,
        "ports": [int(p) for p in re.findall(r"^\s*listen\s+(?:127\.0\.0\.1:)?(\d+)(?:\s+ssl)?;", text, re.M)],
        "catalog_proxy": re.findall(
            r"listen\s+127\.0\.0\.1:(\d+);\s*location\s+/_catalog/\s*\{[^}]*proxy_pass\s+(https://[^;]+);[^}]*proxy_ssl_verify\s+on;", text
        ),
        "body_temp": body.group(1) if body else None,
        "dav": {loc: methods.split() for loc, methods in dav},
    }


def under(path, base):
    """`path` relative to `base`, or None when it is not inside it."""
    if path is None or base is None:
        return None
    rel = posixpath.relpath(posixpath.normpath(path), posixpath.normpath(base))
    return None if rel == ".." or rel.startswith("../") else rel


def check_storage(r, t, expect, gateway, work):
    """Returns the name of the disk volume nginx and valkyrie share, for the nginx run."""
    st = component(r, "storage")
    pairs = (gateway or {}).get("config") or {}
    pairs = pairs.get("pairs", [])
    if st is None:
        t.that(not expect, f"no storage workload, expected {expect} storage nodes")
        return
    name = st["metadata"]["name"]
    replicas = st["spec"]["replicas"]
    if expect is not None:
        t.that(replicas == expect, f"storage replicas {replicas}, expected {expect}")
    headless = headless_service(r, st)
    t.that(headless is not None, f"{name}: serviceName is not a headless Service selecting it")
    nginx, valkyrie = container(st, "nginx"), container(st, "valkyrie")
    if not t.that(nginx and valkyrie, f"{name}: needs containers nginx and valkyrie"):
        return
    claims = {v["metadata"]["name"] for v in st["spec"].get("volumeClaimTemplates", [])}
    shared = {m["name"] for m in nginx.get("volumeMounts", [])} & {m["name"] for m in valkyrie.get("volumeMounts", [])} & claims
    if not t.that(len(shared) == 1, f"{name}: nginx and valkyrie share no disk claim template (shared: {shared})"):
        return
    disk_volume = next(iter(shared))
    nginx_mount = mount_of(nginx, disk_volume)["mountPath"]
    valkyrie_mount = mount_of(valkyrie, disk_volume)["mountPath"]

    command = nginx.get("command", []) + nginx.get("args", [])
    conf_path = command[command.index("-c") + 1] if "-c" in command else None
    conf = file_from_mount(r, st, nginx, conf_path or "")
    if not t.that(conf is not None, f"{name}: nginx -c {conf_path!r} is not a mounted ConfigMap key"):
        return
    facts = nginx_conf_facts(conf)
    webdav_port = port_number(nginx, "webdav")
    t.that(facts["listen"] == webdav_port, f"{name}: nginx listens on {facts['listen']}, container port is {webdav_port}")
    t.that(
        facts["ssl"] == facts["verify_client"],
        f"{name}: nginx serves WebDAV with ssl={facts['ssl']} but ssl_verify_client on={facts['verify_client']}",
    )
    for probe in ("livenessProbe", "readinessProbe"):
        get = nginx.get(probe, {}).get("httpGet", {})
        port = port_number(nginx, get.get("port"))
        t.that(get.get("path") == HEALTH_PATH, f"{name}: nginx {probe} path is {get.get('path')!r}")
        # A client-certificate port cannot be probed by the kubelet: a plain one is.
        t.that(
            port in facts["ports"] and (port != webdav_port or not facts["ssl"]),
            f"{name}: nginx {probe} port {port} is not a plain-HTTP port of nginx.conf {facts['ports']}",
        )
    for f in ("ssl_certificate", "ssl_certificate_key", "ssl_client_certificate", "proxy_ssl_trusted_certificate"):
        for path in re.findall(rf"^\s*{f}\s+(\S+);", conf, re.M):
            found = secret_file(r, st, nginx, path)
            t.that(found is not None and found[2] is not None or (found and r.get("Secret", found[0]) is None),
                   f"{name}: nginx {f} {path} is not a key of a Secret mounted as a folder ({found})")
    t.that(
        under(facts["body_temp"], nginx_mount) is not None,
        f"{name}: client_body_temp_path {facts['body_temp']} is not on the disk volume ({nginx_mount}): MOVE would copy",
    )
    catalog_token = env_ref(valkyrie, "VALKYRIE_CATALOG_TOKEN")
    gw = (gateway or {}).get("workload")
    gw_container = container(gw, "gateway") if gw else None
    admin = env_ref(gw_container, "GATEWAY_ADMIN_TOKEN") if gw_container else None
    catalog = env_ref(gw_container, "GATEWAY_CATALOG_TOKEN") if gw_container else None
    # valkyrie needs /_catalog/ only: the gateway's catalog token, never its admin token.
    t.that(
        catalog_token is not None and catalog_token == catalog,
        f"{name}: VALKYRIE_CATALOG_TOKEN {catalog_token} is not the gateway's GATEWAY_CATALOG_TOKEN {catalog}",
    )
    t.that(catalog_token != admin, f"{name}: VALKYRIE_CATALOG_TOKEN is the gateway's admin token {admin}")
    s3 = [s for s in r.of_kind("Service") if s["spec"].get("clusterIP") != "None" and gw in r.selected_workloads(s["spec"].get("selector", {}))]

    listed = {}
    for p in pairs:
        for index, disk in enumerate(p["disks"]):
            listed.setdefault(disk, []).append((p["id"], index))
    t.that(len(pairs) >= replicas // 2, f"the gateway config lists {len(pairs)} pairs for {replicas} storage nodes")
    for ordinal in range(replicas):
        pod = f"{name}-{ordinal}"
        argv, err = run_script(valkyrie, pod, work)
        if not t.that(argv is not None, err):
            continue
        t.that(argv[0] == "valkyrie", f"{pod}: the valkyrie container runs {argv[0]}")
        disk = flag(argv, "--disk")
        rel_valkyrie = under(disk, valkyrie_mount)
        t.that(rel_valkyrie is not None, f"{pod}: valkyrie --disk {disk} is not on the shared volume ({valkyrie_mount})")
        host = f"{pod}.{r.dns(headless['metadata']['name'])}" if headless else pod
        scheme = "https" if facts["ssl"] else "http"
        owners = [
            (url, where)
            for url, where in listed.items()
            if url.startswith(f"{scheme}://{host}:{webdav_port}/")
        ]
        if not t.that(len(owners) == 1 and len(owners[0][1]) == 1, f"{pod}: the gateway config lists this node {owners} (once expected)"):
            continue
        url, [(pair, index)] = owners[0]
        t.that(flag(argv, "--pair") == str(pair), f"{pod}: valkyrie --pair {flag(argv, '--pair')}, the config has the node in pair {pair}")
        t.that(flag(argv, "--index") == str(index), f"{pod}: valkyrie --index {flag(argv, '--index')}, the config has the node as disk {index}")
        url_path = url.split(f":{webdav_port}", 1)[1]
        served = posixpath.join(facts["root"] or "", url_path.lstrip("/"))
        t.that(
            rel_valkyrie is not None and under(served, nginx_mount) == rel_valkyrie,
            f"{pod}: nginx serves {url_path} from {served} (mount {nginx_mount}), valkyrie works on {disk} (mount {valkyrie_mount})",
        )
        methods = [m for loc, m in facts["dav"].items() if (url_path.rstrip("/") + "/").startswith(loc)]
        t.that(
            methods and {"PUT", "DELETE", "MOVE"} <= set(methods[0]),
            f"{pod}: nginx has no dav location with PUT, DELETE, MOVE for {url_path}",
        )
        catalog = flag(argv, "--catalog")
        s3_tls = any(p.get("appProtocol") == "https" for s in s3 for p in s["spec"]["ports"])
        if s3_tls:
            # valkyrie's catalog client is plain HTTP: its nginx carries the calls over HTTPS.
            want = [f"https://{r.dns(s['metadata']['name'])}:{p['port']}" for s in s3 for p in s["spec"]["ports"]]
            proxies = {f"http://127.0.0.1:{port}": upstream for port, upstream in facts["catalog_proxy"]}
            t.that(
                catalog in proxies and proxies[catalog] in want,
                f"{pod}: valkyrie --catalog {catalog}, expected an nginx server on 127.0.0.1 proxying /_catalog/ "
                f"with proxy_ssl_verify on to one of {want} ({proxies})",
            )
        else:
            want = [f"http://{r.dns(s['metadata']['name'])}:{p['port']}" for s in s3 for p in s["spec"]["ports"]]
            t.that(catalog in want, f"{pod}: valkyrie --catalog {catalog}, expected one of {want}")
        storage_flags = [f for f in TLS_FLAGS["storage"] if flag(argv, f)]
        t.that(
            storage_flags == (list(TLS_FLAGS["storage"]) if facts["ssl"] else []),
            f"{pod}: valkyrie storage TLS flags {storage_flags} with ssl={facts['ssl']}",
        )
        for f in storage_flags:
            found = secret_file(r, st, valkyrie, flag(argv, f))
            t.that(found is not None, f"{pod}: valkyrie {f} {flag(argv, f)} is not a key of a Secret mounted as a folder")
    storage_urls = [u for u in listed if u.startswith(("http://", "https://")) and f".{r.dns(headless['metadata']['name'])}:" in u] if headless else []
    t.that(len(storage_urls) == replicas, f"the gateway config lists {len(storage_urls)} storage node disks, expected {replicas}")
    return disk_volume


def check_service_monitor(r, t, gateway):
    gw = (gateway or {}).get("workload")
    gw_container = container(gw, "gateway") if gw else None
    metrics = env_ref(gw_container, "GATEWAY_METRICS_TOKEN") if gw_container else None
    metrics_open = ((gateway or {}).get("config") or {}).get("metrics_open") is True
    s3_tls = (gateway or {}).get("s3_tls") is True
    for sm in r.of_kind("ServiceMonitor"):
        name = sm["metadata"]["name"]
        selector = sm["spec"]["selector"]["matchLabels"]
        services = [s for s in r.of_kind("Service") if all(s["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())]
        t.that(len(services) == 1, f"ServiceMonitor {name} selects {len(services)} Services, expected one")
        admin_port = (gateway or {}).get("admin_port")
        for ep in sm["spec"]["endpoints"]:
            t.that(ep.get("path") == "/_metrics", f"ServiceMonitor {name}: path {ep.get('path')}")
            ports = [p for s in services for p in s["spec"]["ports"] if p.get("name") == ep.get("port")]
            t.that(ports, f"ServiceMonitor {name}: port {ep.get('port')!r} is not a named port of the selected Service")
            # The admin listener, scraped while S3 connections are at their bound: HTTPS with
            # the S3 certificate when the gateway has --tls-cert, else plain HTTP.
            scheme = "https" if s3_tls else "http"
            t.that(
                gw_container is not None
                and all(port_number(gw_container, p.get("targetPort", p["port"])) == admin_port for p in ports)
                and ep.get("scheme", "http") == scheme,
                f"ServiceMonitor {name}: endpoint {ep.get('port')!r} does not reach the admin port {admin_port} over {scheme}",
            )
            for p in ports:
                t.that(
                    p.get("appProtocol", scheme) == scheme,
                    f"ServiceMonitor {name}: the Service's port {p.get('name')!r} says appProtocol {p.get('appProtocol')!r}, the admin listener is {scheme}",
                )
            tls = ep.get("tlsConfig")
            if s3_tls:
                check_monitor_tls(t, r, name, tls, gateway)
            else:
                t.that(tls is None, f"ServiceMonitor {name}: a tlsConfig for a plain-HTTP admin listener")
            if metrics_open and "authorization" not in ep:
                continue
            # /_metrics answers 401/403 without a token: Prometheus must send the gateway's
            # metrics token.
            auth = ep.get("authorization") or {}
            cred = auth.get("credentials") or {}
            t.that(
                auth.get("type", "Bearer") == "Bearer" and bool(cred.get("name")) and bool(cred.get("key")),
                f"ServiceMonitor {name}: endpoint {ep.get('port')!r} has no bearer credentials (authorization) and metrics_open is off",
            )
            if cred:
                keys = r.secret_keys(cred.get("name"))
                t.that(
                    keys is not None and cred.get("key") in keys,
                    f"ServiceMonitor {name}: credentials {cred} name no key of an existing Secret",
                )
                t.that(
                    metrics is not None and (cred.get("name"), cred.get("key")) == metrics,
                    f"ServiceMonitor {name}: credentials {cred} are not the gateway's GATEWAY_METRICS_TOKEN {metrics}",
                )


def check_monitor_tls(t, r, name, tls, gateway):
    """A scrape over HTTPS verifies the S3 certificate: against the ca.crt of the Secret the
    gateway's --tls-cert comes from, for a name the certificate carries (the S3 Service's;
    check_tokens connects with it), never insecureSkipVerify."""
    if not t.that(isinstance(tls, dict), f"ServiceMonitor {name}: https without a tlsConfig"):
        return
    t.that(not tls.get("insecureSkipVerify"), f"ServiceMonitor {name}: insecureSkipVerify, although the S3 Secret has a CA")
    ca = ((tls.get("ca") or {}).get("secret")) or {}
    gw = gateway["workload"]
    c = container(gw, "gateway")
    cert_flags = {flag(argv, "--tls-cert") for _, argv in gateway["runs"]} - {None}
    s3_secrets = {found[0] for f in cert_flags if (found := secret_file(r, gw, c, f))}
    t.that(
        ca.get("key") == "ca.crt" and ca.get("name") in s3_secrets,
        f"ServiceMonitor {name}: tlsConfig.ca {ca} is not ca.crt of the S3 Secret {sorted(s3_secrets)}",
    )
    keys = r.secret_keys(ca.get("name"))
    t.that(
        keys is None or "ca.crt" in keys,
        f"ServiceMonitor {name}: the Secret {ca.get('name')!r} has no ca.crt",
    )
    t.that(bool(tls.get("serverName")), f"ServiceMonitor {name}: no tlsConfig.serverName (a scrape reaches a pod IP the certificate does not name)")


def coalesce(base, over):
    """`over` merged into `base` as Helm merges values: maps key by key, null removes."""
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = coalesce(out[key], value)
        else:
            out[key] = value
    return out


def set_value(text):
    """A --set value typed as Helm types it (null, true/false, whole numbers, else text)."""
    if text == "null":
        return None
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    return text


def merged_values(chart_values, helm_args):
    """The values a render used: the chart's values.yaml, the -f files in order, then the
    --set assignments (dotted paths to scalars only: the renders of ci.sh need no more)."""
    with open(chart_values, encoding="utf-8") as f:
        values = yaml.safe_load(f) or {}
    words = shlex.split(helm_args or "")
    if len(words) % 2:
        raise ValueError(f"helm arguments {helm_args!r}: an option without its value")
    sets = []
    for opt, arg in zip(words[::2], words[1::2]):
        if opt in ("-f", "--values"):
            with open(arg, encoding="utf-8") as f:
                values = coalesce(values, yaml.safe_load(f) or {})
        elif opt == "--set":
            sets += arg.split(",")
        else:
            raise ValueError(f"the wiring test cannot follow the helm argument {opt}")
    for assignment in sets:
        path, eq, text = assignment.partition("=")
        if not eq or re.search(r"[\[\]{}\\]", assignment):
            raise ValueError(f"--set {assignment}: only PATH=SCALAR is followed")
        nested = set_value(text)
        for part in reversed(path.split(".")):
            nested = {part: nested}
        values = coalesce(values, nested)
    return values


def lookup(values, path):
    node = values
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def toml_expected(value, kind):
    """What the config file must hold for a set value of `kind`."""
    if kind == "switch" and isinstance(value, bool):
        return "on" if value else "off"
    if kind == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


TOML_TYPES = {"int": int, "bool": bool, "str": str, "switch": str}


def check_settings(t, config, values):
    """Every value of SETTINGS reaches its key with its type when set, and only then."""
    for path, section, key, kind in SETTINGS:
        value = lookup(values, path)
        table = config if section is None else config.get(section, {})
        where = key if section is None else f"[{section}] {key}"
        if value is None or value == "":
            t.that(
                key not in table,
                f"{path} is not set, yet gateway.toml has {where} = {table.get(key)!r} (the gateway's default must apply)",
            )
            continue
        want = toml_expected(value, kind)
        got = table.get(key)
        t.that(
            key in table and got == want and type(got) is TOML_TYPES[kind] and type(want) is TOML_TYPES[kind],
            f"{path} = {value!r}: gateway.toml has {where} = {got!r}, expected {want!r} ({kind})",
        )


def check_valkyrie_flags(t, r, values, work):
    """Each valkyrie.* value set is a flag of the storage nodes' valkyrie, with the same
    number as the gateway's [valkyrie]; an unset one is no flag (unless extraArgs gives it)."""
    st = component(r, "storage")
    if st is None or container(st, "valkyrie") is None:
        return
    argv, err = run_script(container(st, "valkyrie"), f"{st['metadata']['name']}-0", work)
    if not t.that(argv is not None, err):
        return
    extra = set(lookup(values, "storage.valkyrie.extraArgs") or [])
    for path, section, key, kind in SETTINGS:
        if section != "valkyrie":
            continue
        name = "--" + key.replace("_", "-")
        given = [a for a in argv if a == name or a.startswith(name + "=")]
        value = lookup(values, path)
        if value is None or value == "":
            t.that(not given or name in extra, f"{path} is not set, yet valkyrie runs with {name} {flag(argv, name)}")
        else:
            want = str(toml_expected(value, kind))
            t.that(
                len(given) == 1 and flag(argv, name) == want,
                f"{path} = {value!r}: valkyrie runs with {name} {flag(argv, name)!r} ({len(given)} times), expected {want}",
            )


def example_keys(text):
    """Section (None for the top level) -> keys of `gateway config example`, active or
    commented out (`# key = ...`), as the gateway's own test of the example reads them."""
    keys, current = {None: set()}, None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# "):
            stripped = stripped[2:].strip()
        if stripped.startswith("["):
            current = stripped.strip("[]")
            keys.setdefault(current, set())
            continue
        key, eq, _ = stripped.partition(" = ")
        if eq and " " not in key and not key.startswith("#"):
            keys[current].add(key)
    return keys


def config_keys(config):
    """Section -> keys of a parsed config file (a [[table]] array is one section)."""
    out = {None: set()}
    for key, value in config.items():
        if isinstance(value, dict):
            out.setdefault(key, set()).update(value)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            out.setdefault(key, set()).update(k for v in value for k in v)
        else:
            out[None].add(key)
    return out


def check_known_keys(t, config, binary):
    """The rendered keys are the binary's, and the binary's keys are all carried."""
    done = subprocess.run([binary, "config", "example"], capture_output=True, text=True, timeout=BINARY_TIMEOUT_SECS, check=False)
    known = example_keys(done.stdout)
    if not t.that(done.returncode == 0 and known[None], f"gateway config example failed: {done.stderr.strip()[-500:]}"):
        return
    for section, keys in config_keys(config).items():
        for key in sorted(keys):
            where = key if section is None else f"[{section}] {key}"
            t.that(key in known.get(section, ()), f"gateway.toml has {where}, which `gateway config example` does not name")
    carried = {}
    for _, section, key, _ in SETTINGS:
        carried.setdefault(section, set()).add(key)
    for section, keys in known.items():
        for key in sorted(keys):
            where = key if section is None else f"[{section}] {key}"
            t.that(
                key in carried.get(section, ()) or key in CHART_WRITES_OTHERWISE.get(section, ()),
                f"the gateway knows {where} (gateway config example) but the chart has no value for it: "
                "add one (values.yaml, gateway-configmap.yaml, helm/README.md, SETTINGS)",
            )


# Token values the real gateway is started with, one per variable, all distinct.
TEST_TOKENS = {
    "GATEWAY_ADMIN_TOKEN": "ci-admin-token",
    "GATEWAY_METRICS_TOKEN": "ci-metrics-token",
    "GATEWAY_CATALOG_TOKEN": "ci-catalog-token",
}


def check_tls_values(t, r, values, gateway):
    """TLS is on where the values say: the S3 port (tls.enabled, the S3 Service's port
    says https), the peers (cluster.tls.enabled with more than one gateway) and the storage
    nodes (storage.tls.enabled: https:// disks, nginx with ssl)."""
    gw = gateway["workload"]
    replicas = gw["spec"]["replicas"]
    want = {
        "s3": bool(lookup(values, "tls.enabled")),
        "cluster": bool(lookup(values, "cluster.tls.enabled")) and replicas > 1,
        "storage": bool(lookup(values, "storage.tls.enabled")) and (lookup(values, "storage.replicas") or 0) > 0,
    }
    for ordinal, argv in gateway["runs"]:
        for group, flags in TLS_FLAGS.items():
            on = all(flag(argv, f) for f in flags)
            t.that(on == want[group], f"gateway-{ordinal}: {group} TLS flags given={on}, the values say {want[group]}")
    s3 = [s for s in r.of_kind("Service") if s["spec"].get("clusterIP") != "None" and gw in r.selected_workloads(s["spec"].get("selector", {}))]
    for svc in s3:
        for p in svc["spec"]["ports"]:
            proto = "https" if want["s3"] else "http"
            t.that(
                p.get("appProtocol") == proto and p.get("name") == proto,
                f"Service {svc['metadata']['name']}: port {p.get('name')!r} appProtocol {p.get('appProtocol')!r}, expected {proto}",
            )
    disks = [d for p in (gateway["config"] or {}).get("pairs", []) for d in p["disks"]]
    chart_disks = [d for d in disks if ".svc." in d]
    scheme = "https://" if want["storage"] else "http://"
    t.that(all(d.startswith(scheme) for d in chart_disks), f"storage node disks {chart_disks} are not all {scheme}")


def tls_files(r, workload, c, args, work):
    """Replaces each certificate flag's pod path in `args` by a copy of the rendered
    Secret's key (the chart's generated certificates). False when one is not rendered."""
    for i, a in enumerate(args[:-1]):
        if not any(a in flags for flags in TLS_FLAGS.values()):
            continue
        found = secret_file(r, workload, c, args[i + 1])
        if found is None or found[2] is None:
            return False
        path = os.path.join(work, "tls", found[0], found[1])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(found[2])
        args[i + 1] = path
    return True


def check_real_gateway(t, r, gateway, binary, work):
    """The real gateway accepts the rendered config file and flags, the chart's
    certificates included.

    A single node is also asked whether it reads the token variables the pod gets:
    /_metrics with the metrics token (and, unless metrics_open, not without one),
    /_catalog/ with the catalog token and not with the metrics token, over HTTPS checked
    against the S3 Secret's ca.crt when TLS is on; and its admin listener as the pod's
    users reach it (check_tokens).
    """
    cfg = os.path.join(work, "gateway.toml")
    with open(cfg, "w", encoding="utf-8") as f:
        f.write(gateway["config_text"])
    c = container(gateway["workload"], "gateway")
    for ordinal, argv in gateway["runs"][:1]:
        args = [binary] + argv[1:]
        args[args.index("--config") + 1] = cfg
        if not tls_files(r, gateway["workload"], c, args, work):
            continue  # a Secret the chart does not render: nothing to start with
        if "--admin-listen" in args:
            args[args.index("--admin-listen") + 1] = "127.0.0.1:0"
        ca = None
        if "--tls-cert" in args:
            ca = secret_file(r, gateway["workload"], c, flag(argv, "--tls-cert").rsplit("/", 1)[0] + "/ca.crt")
            ca = ca[2] if ca else None
            t.that(ca is not None, "the S3 Secret has no ca.crt to check the gateway's certificate with")
        data = os.path.join(work, f"data-{ordinal}")
        args += ["--data", data, "--listen", "127.0.0.1:0"]
        env = dict(os.environ, GATEWAY_ACCESS_KEY="GKCITEST", GATEWAY_SECRET_KEY="secret", GATEWAY_CLUSTER_SECRET="x" * 32)
        # Only the variables the pod gets (check_gateway has said which are missing).
        pod_env = {e["name"] for e in container(gateway["workload"], "gateway").get("env", [])}
        env.update({k: v for k, v in TEST_TOKENS.items() if k in pod_env})
        metrics_open = (gateway["config"] or {}).get("metrics_open") is True
        if ca is not None:
            # NOTES.txt's `gateway admin --ca` names this file of the pod.
            t.that(
                secret_file(r, gateway["workload"], c, NOTES_ADMIN_CA) is not None,
                f"{NOTES_ADMIN_CA} (NOTES.txt's gateway admin --ca) is not a file of a mounted Secret",
            )
        monitors = [
            (ep.get("tlsConfig") or {})
            for sm in r.of_kind("ServiceMonitor")
            for ep in sm["spec"]["endpoints"]
            if ep.get("scheme") == "https"
        ]

        def while_up(addr, admin):
            check_tokens(t, addr, metrics_open, ca, work)
            check_admin_listener(t, r, binary, admin, ca is not None, monitors, env, work)

        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # A cluster node probes every disk before it serves, and so does any node for an
        # https:// disk (its TLS is checked at start).
        probes = "--peers" in args or any(
            d.startswith("https://") for p in (gateway["config"] or {}).get("pairs", []) for d in p["disks"]
        )
        try:
            if probes:
                out, err = proc.communicate(timeout=BINARY_TIMEOUT_SECS)
            else:
                out, err = first_line(proc, while_up)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        if probes:
            # The storage nodes do not exist here: getting to that probe means the config
            # file and flags (certificates included) were accepted.
            t.that(
                ("is not reachable" in err or ("refused at start" in err and "dns error" in err)) and "config file" not in err,
                f"the gateway did not accept the rendered config and flags: {err.strip()[-500:]}",
            )
        else:
            t.that("listening on" in out, f"the gateway did not start on the rendered config: {err.strip()[-500:]}")


def s3_ca_file(ca, work):
    """The S3 Secret's ca.crt `ca` written to a file; its path."""
    path = os.path.join(work, "s3-ca.crt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(ca)
    return path


def https_status(host, port, server_name, context, path, token=None):
    """The status of GET `path` over HTTPS to host:port, the certificate checked by
    `context` for `server_name` (which a Prometheus scrape of a pod IP sets, and
    http.client cannot)."""
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=server_name) as s:
            auth = f"Authorization: Bearer {token}\r\n" if token else ""
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: {server_name}\r\n{auth}Connection: close\r\n\r\n".encode())
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
    return int(answer.split(b" ", 2)[1])


def plain_answer(host, port):
    """What a plain-HTTP GET of /_health gets back before the server closes (bounded)."""
    answer = b""
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"GET {HEALTH_PATH} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except (ConnectionResetError, socket.timeout):
            pass
    return answer


def check_admin_listener(t, r, binary, admin, tls, monitors, env, work):
    """The admin listener `admin` as the pod's users reach it: the probes' /_health, plain
    HTTP or, with `tls` (--tls-cert), HTTPS with the S3 certificate checked against the S3
    Secret's ca.crt for 127.0.0.1 (which it names) and plain HTTP unanswered; `gateway
    admin` as NOTES.txt runs it in a pod; and each ServiceMonitor endpoint's scrape over
    HTTPS (`monitors`: their tlsConfig), with its CA Secret and serverName, as Prometheus
    makes it."""
    if not t.that(admin is not None, "the gateway printed no `admin listening on` (--admin-listen)"):
        return
    a_host, a_port = admin.rsplit(":", 1)
    ca_path = os.path.join(work, "s3-ca.crt") if tls else None
    if tls:
        context = ssl.create_default_context(cafile=ca_path)
        try:
            got = https_status(a_host, a_port, "127.0.0.1", context, HEALTH_PATH)
        except OSError as e:
            got = f"an error: {e}"
        t.that(got == 200, f"/_health over HTTPS on the admin listener answered {got}")
        answer = plain_answer(a_host, a_port)
        t.that(
            not answer.startswith(b"HTTP/"),
            f"plain HTTP on the admin listener of a TLS gateway was answered: {answer[:200]!r}",
        )
    else:
        c = http.client.HTTPConnection(a_host, int(a_port), timeout=10)
        try:
            c.request("GET", HEALTH_PATH)
            got = c.getresponse().status
        finally:
            c.close()
        t.that(got == 200, f"/_health on the admin listener answered {got}")
    cli = [binary, "admin", "--endpoint", f"{'https' if tls else 'http'}://127.0.0.1:{a_port}"]
    cli += ["--ca", ca_path] if tls else []
    cli_env = {k: v for k, v in env.items() if k not in ("GATEWAY_ADMIN_CA", "SSL_CERT_FILE", "SSL_CERT_DIR")}
    run = subprocess.run(cli + ["pairs", "list"], env=cli_env, capture_output=True, text=True, timeout=BINARY_TIMEOUT_SECS)
    t.that(
        run.returncode == 0 and run.stdout.startswith("PAIR"),
        f"{' '.join(cli[1:])} pairs list (as NOTES.txt says): exit {run.returncode}: {run.stdout[-300:]}{run.stderr[-500:]}",
    )
    for tls_config in monitors:
        ca_ref = (tls_config.get("ca") or {}).get("secret") or {}
        monitor_ca = r.secret_value(ca_ref.get("name"), ca_ref.get("key"))
        server_name = tls_config.get("serverName")
        if not t.that(
            monitor_ca is not None and server_name,
            f"the ServiceMonitor's tlsConfig {tls_config}: no rendered CA or no serverName to scrape with",
        ):
            continue
        path = os.path.join(work, "monitor-ca.crt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(monitor_ca)
        context = ssl.create_default_context(cafile=path)
        try:
            got = https_status(a_host, a_port, server_name, context, "/_metrics", TEST_TOKENS["GATEWAY_METRICS_TOKEN"])
        except OSError as e:
            got = f"an error: {e}"
        t.that(got == 200, f"the ServiceMonitor's scrape (CA {ca_ref}, serverName {server_name}) got {got}, not 200")


def check_tokens(t, addr, metrics_open, ca, work):
    """Which token opens which internal API of a gateway listening on `addr` (HTTPS
    checked against `ca` when given); the admin listener is check_admin_listener's."""
    host, port = addr.rsplit(":", 1)
    context = None
    if ca is not None:
        # The chart's certificate names 127.0.0.1 (kubectl port-forward), checked here.
        context = ssl.create_default_context(cafile=s3_ca_file(ca, work))

    def status(path, token=None):
        if context is not None:
            c = http.client.HTTPSConnection(host, int(port), timeout=10, context=context)
        else:
            c = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            c.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
            resp = c.getresponse()
            resp.read()
            return resp.status
        finally:
            c.close()

    metrics, catalog = TEST_TOKENS["GATEWAY_METRICS_TOKEN"], TEST_TOKENS["GATEWAY_CATALOG_TOKEN"]
    got = status("/_metrics", metrics)
    t.that(got == 200, f"the gateway answered /_metrics with GATEWAY_METRICS_TOKEN {got}, not 200")
    got = status("/_metrics")
    if metrics_open:
        t.that(got == 200, f"metrics_open is on, but /_metrics without a token answered {got}")
    else:
        t.that(got in (401, 403), f"/_metrics without a token answered {got}, not 401/403")
    got = status("/_catalog/deleting?pair=0", catalog)
    t.that(got not in (401, 403), f"/_catalog/ with GATEWAY_CATALOG_TOKEN answered {got}")
    got = status("/_catalog/deleting?pair=0", metrics)
    t.that(got in (401, 403), f"/_catalog/ with the metrics token answered {got}, not 401/403")


def first_line(proc, while_up=None):
    """Waits (bounded) for `listening on`, calls `while_up(addr, admin addr or None)`, then
    stops the process; returns (stdout, stderr)."""
    deadline = time.monotonic() + BINARY_TIMEOUT_SECS
    seen, addr, admin = "", None, None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen += line
        if line.startswith("admin listening on"):
            admin = line.split("listening on", 1)[1].split()[0]
        elif "listening on" in line:
            addr = line.split("listening on", 1)[1].split()[0]
            break
        if not line:
            break
    if while_up and addr:
        while_up(addr, admin)
    proc.terminate()
    out, err = proc.communicate(timeout=BINARY_TIMEOUT_SECS)
    return seen + out, err


def check_real_valkyrie(t, r, binary, work):
    st = component(r, "storage")
    if st is None:
        return
    argv, err = run_script(container(st, "valkyrie"), f"{st['metadata']['name']}-0", work)
    if argv is None:
        return
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=BINARY_TIMEOUT_SECS, check=False).stdout
    for a in argv[1:]:
        if a.startswith("--"):
            t.that(re.search(rf"{re.escape(a)}\b", help_text), f"valkyrie has no flag {a}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_tls_gateway(r, binary, work):
    """A single real gateway serving HTTPS with the rendered S3 Secret's certificate, for
    the storage node's catalog proxy to reach: (process, port) or None."""
    gw = component(r, "gateway")
    c = container(gw, "gateway") if gw else None
    argv, _ = run_script(c, f"{gw['metadata']['name']}-0", work) if c else (None, None)
    if not argv or not flag(argv, "--tls-cert"):
        return None
    args = [binary, "serve", "--tls-cert", flag(argv, "--tls-cert"), "--tls-key", flag(argv, "--tls-key")]
    if not tls_files(r, gw, c, args, os.path.join(work, "proxy-gateway")):
        return None
    args += ["--data", os.path.join(work, "proxy-gateway", "data"), "--listen", "127.0.0.1:0"]
    env = dict(os.environ, GATEWAY_ACCESS_KEY="GKCITEST", GATEWAY_SECRET_KEY="secret", **TEST_TOKENS)
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + BINARY_TIMEOUT_SECS
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("listening on"):
            return proc, int(line.split()[2].rsplit(":", 1)[1])
    proc.kill()
    proc.communicate()
    return None


def check_real_nginx(t, r, binary, work, disk_volume, gateway_bin=None):
    """The rendered nginx.conf runs and speaks the gateway's WebDAV protocol; its catalog
    proxy (with tls.enabled) carries valkyrie's calls to a real HTTPS gateway."""
    st = component(r, "storage")
    nginx = container(st, "nginx") if st else None
    command = (nginx or {}).get("command", [])
    if nginx is None or disk_volume is None or "-c" not in command:
        return  # check_storage has said what is wrong
    conf = file_from_mount(r, st, nginx, command[command.index("-c") + 1])
    disk_mount = mount_of(nginx, disk_volume)["mountPath"]
    if conf is None:
        return
    root = os.path.join(work, "nginx")
    os.makedirs(os.path.join(root, "tmp"), exist_ok=True)
    os.makedirs(os.path.join(root, "disk"), exist_ok=True)
    facts = nginx_conf_facts(conf)
    # Every port of nginx.conf moved to a free one: WebDAV, health, the catalog proxy.
    ports = {p: free_port() for p in facts["ports"]}
    port = ports.get(facts["listen"])
    health = port_number(nginx, (nginx.get("readinessProbe") or {}).get("httpGet", {}).get("port"))
    # The pod's paths, moved into the temp folder in one pass (the folder is under /tmp).
    moved = {disk_mount.rstrip("/") + "/": root + "/disk/", "/tmp/": root + "/tmp/"}
    conf = re.sub("|".join(re.escape(k) for k in moved), lambda m: moved[m.group(0)], conf)
    # The certificate files from the rendered Secrets, into the temp folder (after the
    # paths above: the temp folder is under /tmp too).
    for path in set(re.findall(r"^\s*(?:ssl_certificate|ssl_certificate_key|ssl_client_certificate|proxy_ssl_trusted_certificate)\s+(\S+);", conf, re.M)):
        found = secret_file(r, st, nginx, path)
        if found is None or found[2] is None:
            return  # check_storage has said so, or a Secret the chart does not render
        local = os.path.join(work, "nginx-tls", path.lstrip("/"))
        os.makedirs(os.path.dirname(local), exist_ok=True)
        with open(local, "w", encoding="utf-8") as f:
            f.write(found[2])
        conf = conf.replace(f" {path};", f" {local};")
    conf = re.sub(
        r"listen\s+(?:127\.0\.0\.1:)?(\d+)(\s+ssl)?;",
        lambda m: f"listen 127.0.0.1:{ports[int(m.group(1))]}{m.group(2) or ''};",
        conf,
    )
    # The S3 Service does not resolve here: the catalog proxy points at 127.0.0.1 (nginx
    # resolves proxy_pass hosts at start). proxy_ssl_name keeps the name checked.
    gateway_proc = None
    if facts["catalog_proxy"] and gateway_bin:
        gateway_proc = start_tls_gateway(r, gateway_bin, work)
        t.that(gateway_proc is not None, "no HTTPS gateway started for the catalog proxy (rendered S3 certificate)")
    upstream = f"https://127.0.0.1:{gateway_proc[1]}" if gateway_proc else "https://127.0.0.1:9"
    conf = re.sub(r"proxy_pass\s+https://[^;]+;", f"proxy_pass {upstream};", conf)
    if os.geteuid() == 0:
        # The pod runs nginx as the disk's owner; as root here, workers would be nobody.
        conf = "user root;\n" + conf
    path = os.path.join(work, "nginx.conf")
    with open(path, "w", encoding="utf-8") as f:
        f.write(conf)
    log = open(os.path.join(work, "nginx.log"), "w+", encoding="utf-8")
    proc = subprocess.Popen([binary, "-e", "stderr", "-p", root, "-c", path], stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + NGINX_START_SECS
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        log.seek(0)
        if not t.that(proc.poll() is None, f"nginx did not start on the rendered config: {log.read()}"):
            return
        base = "/" + [loc for loc in facts["dav"]][0].strip("/")
        host = f"127.0.0.1:{port}"
        context = None
        if facts["ssl"]:
            # As the gateway calls it: the node checked against the storage CA (for its
            # pod's name), the client certificate of the gateway's storage Secret.
            gw = component(r, "gateway")
            gwc = container(gw, "gateway") if gw else None
            argv = next(iter(run_script(gwc, f"{gw['metadata']['name']}-0", work)[:1]), None) if gwc else None
            files = {f: secret_file(r, gw, gwc, flag(argv or [], f)) for f in TLS_FLAGS["storage"]}
            if not t.that(all(v and v[2] for v in files.values()), f"no storage client certificate of the gateway to call nginx with ({files})"):
                return
            local = {}
            for f, (_, key, text) in files.items():
                local[f] = os.path.join(work, "client-" + key)
                with open(local[f], "w", encoding="utf-8") as out:
                    out.write(text)
            context = ssl.create_default_context(cafile=local["--storage-ca"])
            context.load_cert_chain(local["--storage-cert"], local["--storage-key"])
            bare = ssl.create_default_context(cafile=local["--storage-ca"])
            sni = f"{st['metadata']['name']}-0.{r.dns(headless_service(r, st)['metadata']['name'])}"

        def connect(ctx):
            if ctx is None:
                return http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ctx)
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            c.sock = ctx.wrap_socket(sock, server_hostname=sni)
            return c

        def call(method, url, body=None, headers=None, ctx=context):
            c = connect(ctx)
            c.request(method, url, body=body, headers=headers or {})
            resp = c.getresponse()
            data = resp.read()
            c.close()
            return resp.status, data

        if context is not None:
            status, _ = call("GET", f"{base}/", ctx=bare)
            t.that(status == 400, f"nginx answered {status} to a client without a certificate, not 400 (ssl_verify_client on)")
        body = b"dedup " * 1000
        status, _ = call("PUT", f"{base}/tmp/abc", body)
        t.that(status in (201, 204), f"nginx PUT into tmp/ answered {status}")
        scheme = "https" if facts["ssl"] else "http"
        status, _ = call("MOVE", f"{base}/tmp/abc", headers={"Destination": f"{scheme}://{host}{base}/ab/cd/abcd", "Overwrite": "T"})
        t.that(status in (201, 204), f"nginx MOVE to the content address answered {status}")
        status, data = call("GET", f"{base}/ab/cd/abcd")
        t.that(status == 200 and data == body, f"nginx GET after MOVE answered {status} with {len(data)} bytes")
        status, _ = call("DELETE", f"{base}/ab/cd/abcd")
        t.that(status == 204, f"nginx DELETE answered {status}")
        c = http.client.HTTPConnection("127.0.0.1", ports.get(health, port), timeout=10)
        c.request("GET", HEALTH_PATH)
        status = c.getresponse().status
        c.close()
        t.that(status == 200, f"nginx /_health on the probes' port answered {status}")
        for catalog_port, _ in facts["catalog_proxy"] if gateway_proc else []:
            # As valkyrie calls it: plain HTTP to nginx on 127.0.0.1, HTTPS on to the
            # gateway, its certificate checked for the S3 Service's name.
            c = http.client.HTTPConnection("127.0.0.1", ports[int(catalog_port)], timeout=10)
            c.request("GET", "/_catalog/deleting?pair=0", headers={"Authorization": f"Bearer {TEST_TOKENS['GATEWAY_CATALOG_TOKEN']}"})
            resp = c.getresponse()
            body = resp.read()
            c.close()
            log.seek(0)
            t.that(
                resp.status == 200,
                f"valkyrie's /_catalog/ through nginx's HTTPS proxy answered {resp.status} {body[:200]!r}: {log.read()[-500:]}",
            )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=NGINX_START_SECS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if gateway_proc:
            gateway_proc[0].terminate()
            try:
                gateway_proc[0].communicate(timeout=BINARY_TIMEOUT_SECS)
            except subprocess.TimeoutExpired:
                gateway_proc[0].kill()
                gateway_proc[0].communicate()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rendered")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--gateways", type=int)
    parser.add_argument("--storage", type=int)
    parser.add_argument("--existing-secret")
    parser.add_argument("--gateway-bin")
    parser.add_argument("--valkyrie-bin")
    parser.add_argument("--nginx")
    parser.add_argument("--chart-values")
    parser.add_argument("--helm-args", default="")
    args = parser.parse_args()
    r = Rendered(args.rendered, args.namespace, args.existing_secret)
    t = Checks()
    work = tempfile.mkdtemp(prefix="helm-wiring-")
    try:
        check_services(r, t)
        check_pdbs(r, t)
        check_volumes_and_env(r, t)
        gateway = check_gateway(r, t, args.gateways, work)
        disk_volume = check_storage(r, t, args.storage, gateway, work)
        check_service_monitor(r, t, gateway)
        config = (gateway or {}).get("config")
        if args.chart_values and config is not None:
            values = merged_values(args.chart_values, args.helm_args)
            check_settings(t, config, values)
            check_valkyrie_flags(t, r, values, work)
        if args.gateway_bin and config is not None:
            check_known_keys(t, config, args.gateway_bin)
        if args.chart_values and gateway and config is not None:
            check_tls_values(t, r, merged_values(args.chart_values, args.helm_args), gateway)
        if args.gateway_bin and gateway and gateway["config_text"]:
            check_real_gateway(t, r, gateway, args.gateway_bin, work)
        if args.valkyrie_bin:
            check_real_valkyrie(t, r, args.valkyrie_bin, work)
        if args.nginx:
            check_real_nginx(t, r, args.nginx, work, disk_volume, args.gateway_bin)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # One line per distinct failure: a check repeated per pod fails the same way.
    for failure in dict.fromkeys(t.failures):
        print(f"FAIL {failure}", file=sys.stderr)
    print(f"{args.rendered}: {t.passed} checks passed, {len(t.failures)} failed")
    return 1 if t.failures else 0


if __name__ == "__main__":
    sys.exit(main())
