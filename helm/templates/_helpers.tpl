{{/*
Names, labels and the addresses every object agrees on. The gateway's peers, the disk
URLs in its config file and the valkyrie catalog URL are all built here, so that one
change of a name cannot leave the pieces pointing at each other's old names.
*/}}

{{- define "dedup-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's prefix; short enough that "<prefix>-gateway-headless" fits in 63. */}}
{{- define "dedup-gateway.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "dedup-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* All labels of one component's objects: call with (list . "gateway"). */}}
{{- define "dedup-gateway.labels" -}}
{{- $ctx := index . 0 -}}
{{ include "dedup-gateway.selectorLabels" . }}
helm.sh/chart: {{ include "dedup-gateway.chart" $ctx }}
app.kubernetes.io/managed-by: {{ $ctx.Release.Service }}
app.kubernetes.io/version: {{ $ctx.Chart.AppVersion | quote }}
{{- end -}}

{{/* Selector labels of one component: call with (list . "gateway") or (list . "storage"). */}}
{{- define "dedup-gateway.selectorLabels" -}}
{{- $ctx := index . 0 -}}
app.kubernetes.io/name: {{ include "dedup-gateway.name" $ctx }}
app.kubernetes.io/instance: {{ $ctx.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "dedup-gateway.gateway.name" -}}
{{- printf "%s-gateway" (include "dedup-gateway.fullname" .) -}}
{{- end -}}

{{- define "dedup-gateway.gateway.headless" -}}
{{- printf "%s-gateway-headless" (include "dedup-gateway.fullname" .) -}}
{{- end -}}

{{- define "dedup-gateway.storage.name" -}}
{{- printf "%s-storage" (include "dedup-gateway.fullname" .) -}}
{{- end -}}

{{- define "dedup-gateway.secretName" -}}
{{- default (printf "%s-secret" (include "dedup-gateway.fullname" .)) .Values.secret.existingSecret -}}
{{- end -}}

{{- define "dedup-gateway.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The cluster DNS suffix of a namespaced service: "<svc>.<ns>.svc.<domain>". */}}
{{- define "dedup-gateway.svcDomain" -}}
{{- printf "%s.svc.%s" .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/*
The gateway's --peers: "1=<pod 0>:PORT,2=<pod 1>:PORT,...", each node named by its S3
listen address (node-to-node RPCs use the same port), through the headless service.
*/}}
{{- define "dedup-gateway.gateway.peers" -}}
{{- $name := include "dedup-gateway.gateway.name" . -}}
{{- $suffix := printf "%s.%s" (include "dedup-gateway.gateway.headless" .) (include "dedup-gateway.svcDomain" .) -}}
{{- $peers := list -}}
{{- range $i := until (int .Values.gateway.replicas) -}}
{{- $peers = append $peers (printf "%d=%s-%d.%s:%d" (add1 $i) $name $i $suffix (int $.Values.gateway.port)) -}}
{{- end -}}
{{- join "," $peers -}}
{{- end -}}

{{/* The WebDAV base URL of storage node N's disk: call with (list . N). */}}
{{- define "dedup-gateway.storage.diskUrl" -}}
{{- $ctx := index . 0 -}}
{{- printf "%s://%s-%d.%s.%s:%d/%s" (ternary "https" "http" (eq (include "dedup-gateway.storage.tls" $ctx) "true")) (include "dedup-gateway.storage.name" $ctx) (int (index . 1)) (include "dedup-gateway.storage.name" $ctx) (include "dedup-gateway.svcDomain" $ctx) (int $ctx.Values.storage.port) $ctx.Values.storage.diskName -}}
{{- end -}}

{{/* The S3 service's host name inside the cluster. */}}
{{- define "dedup-gateway.gateway.host" -}}
{{- printf "%s.%s" (include "dedup-gateway.gateway.name" .) (include "dedup-gateway.svcDomain" .) -}}
{{- end -}}

{{/* The S3 service's URL inside the cluster (https with tls.enabled). */}}
{{- define "dedup-gateway.gateway.url" -}}
{{- printf "%s://%s.%s:%d" (ternary "https" "http" (eq (include "dedup-gateway.s3.tls" .) "true")) (include "dedup-gateway.gateway.name" .) (include "dedup-gateway.svcDomain" .) (int .Values.gateway.service.port) -}}
{{- end -}}

{{/*
valkyrie's --catalog. valkyrie speaks plain HTTP only: with tls.enabled it calls the nginx
of its own pod on 127.0.0.1, which carries /_catalog/ to the S3 Service over HTTPS,
checking the gateway's certificate (dedup-gateway.storage.catalogProxy in nginx.conf).
*/}}
{{- define "dedup-gateway.catalog.url" -}}
{{- if eq (include "dedup-gateway.s3.tls" .) "true" -}}
{{- printf "http://127.0.0.1:%d" (int .Values.storage.nginx.catalogPort) -}}
{{- else -}}
{{- include "dedup-gateway.gateway.url" . -}}
{{- end -}}
{{- end -}}

{{/*
TLS switches, "true" or "": HTTPS on the S3 port (tls.enabled); mutual TLS between the
gateways (cluster.tls.enabled, with more than one); HTTPS storage nodes with client
certificates (storage.tls.enabled, with storage nodes).
*/}}
{{- define "dedup-gateway.s3.tls" -}}
{{- if .Values.tls.enabled -}}true{{- end -}}
{{- end -}}
{{- define "dedup-gateway.cluster.tls" -}}
{{- if and .Values.cluster.tls.enabled (gt (int .Values.gateway.replicas) 1) -}}true{{- end -}}
{{- end -}}
{{- define "dedup-gateway.storage.tls" -}}
{{- if and .Values.storage.tls.enabled (gt (int .Values.storage.replicas) 0) -}}true{{- end -}}
{{- end -}}

{{/*
The Secrets of the certificates (tls.crt, tls.key, ca.crt: cert-manager's names): the one
named in the values, else the one the chart generates (tls-secrets.yaml).
*/}}
{{- define "dedup-gateway.tls.s3Secret" -}}
{{- default (printf "%s-s3-tls" (include "dedup-gateway.fullname" .)) .Values.tls.secretName -}}
{{- end -}}
{{- define "dedup-gateway.tls.clusterSecret" -}}
{{- default (printf "%s-cluster-tls" (include "dedup-gateway.fullname" .)) .Values.cluster.tls.secretName -}}
{{- end -}}
{{- define "dedup-gateway.tls.storageSecret" -}}
{{- default (printf "%s-storage-tls" (include "dedup-gateway.fullname" .)) .Values.storage.tls.secretName -}}
{{- end -}}
{{- define "dedup-gateway.tls.storageClientSecret" -}}
{{- default (printf "%s-storage-client-tls" (include "dedup-gateway.fullname" .)) .Values.storage.tls.clientSecretName -}}
{{- end -}}

{{/*
Checks of values the templates cannot render sensibly; a failed check stops `helm install`
with the reason instead of starting pods that crash.
*/}}
{{- define "dedup-gateway.validate" -}}
{{- $gw := int .Values.gateway.replicas -}}
{{- $st := int .Values.storage.replicas -}}
{{- if lt $gw 1 -}}
{{- fail "gateway.replicas must be at least 1" -}}
{{- end -}}
{{- if ne (mod $st 2) 0 -}}
{{- fail (printf "storage.replicas must be even (two storage nodes make one disk pair), not %d" $st) -}}
{{- end -}}
{{- if and (gt $gw 1) (eq $st 0) (empty .Values.gateway.extraPairs) -}}
{{- fail "gateway.replicas > 1 needs disk pairs every gateway reaches: set storage.replicas (2, 4, ...) or gateway.extraPairs" -}}
{{- end -}}
{{- if and .Values.tls.enabled (gt $gw 1) (not .Values.cluster.tls.enabled) -}}
{{- fail "tls.enabled with gateway.replicas > 1 needs cluster.tls.enabled: the gateway refuses --tls-cert in a cluster without cluster TLS (the peers share the S3 port)" -}}
{{- end -}}
{{- if ne (empty .Values.storage.tls.secretName) (empty .Values.storage.tls.clientSecretName) -}}
{{- fail "storage.tls.secretName and storage.tls.clientSecretName go together (both from one CA), or neither (both generated)" -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9][a-z0-9-]*$" .Values.storage.diskName) -}}
{{- fail "storage.diskName must be a plain folder name (lowercase letters, digits, '-')" -}}
{{- end -}}
{{- end -}}

{{/*
A value of gateway.toml as TOML, or "" when the value is null or "" (the key is then left
out, so the gateway's own default applies). Call with (list NAME KEY VALUE KIND), NAME the
value's path for messages; KIND: "int" (a whole number >= 0), "bool", "switch" (true/on
or false/off, written "on"/"off") or "level" (a request log level). A value of the wrong
kind fails the render rather than the gateway's start.
*/}}
{{- define "dedup-gateway.tomlValue" -}}
{{- $name := index . 0 -}}
{{- $v := index . 2 -}}
{{- $kind := index . 3 -}}
{{- if not (or (kindIs "invalid" $v) (and (kindIs "string" $v) (eq $v ""))) -}}
{{- if eq $kind "int" -}}
{{- $whole := or (kindIs "int" $v) (kindIs "int64" $v) -}}
{{- if kindIs "float64" $v -}}
{{- $whole = eq $v (float64 (int64 $v)) -}}
{{- end -}}
{{- if or (not $whole) (lt (int64 $v) 0) -}}
{{- fail (printf "%s must be a whole number of 0 or more, not %v" $name $v) -}}
{{- end -}}
{{- int64 $v -}}
{{- else if eq $kind "bool" -}}
{{- if not (kindIs "bool" $v) -}}
{{- fail (printf "%s must be true or false, not %v" $name $v) -}}
{{- end -}}
{{- $v -}}
{{- else if eq $kind "switch" -}}
{{- if kindIs "bool" $v -}}
{{- ternary "on" "off" $v | quote -}}
{{- else if has $v (list "on" "off") -}}
{{- $v | quote -}}
{{- else -}}
{{- fail (printf "%s must be true/on or false/off, not %v" $name $v) -}}
{{- end -}}
{{- else if eq $kind "level" -}}
{{- if and (kindIs "string" $v) (has $v (list "off" "error" "warn" "info" "debug")) -}}
{{- $v | quote -}}
{{- else -}}
{{- fail (printf "%s must be \"off\", \"error\", \"warn\", \"info\" or \"debug\" (quoted: YAML reads a bare off as false), not %v" $name $v) -}}
{{- end -}}
{{- else -}}
{{- fail (printf "dedup-gateway.tomlValue: unknown kind %s" $kind) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The [valkyrie] settings: (list NAME KEY VALUE "int") per value, for the gateway's config
file and, with "_" as "-", the storage nodes' valkyrie flags. Call with the root context;
the list comes back as JSON (templates return text).
*/}}
{{- define "dedup-gateway.valkyrie.settings" -}}
{{- $v := .Values.valkyrie -}}
{{- $out := list -}}
{{- range $pair := list
    (list "quarantineSecs" "quarantine_secs")
    (list "slaveDelaySecs" "slave_delay_secs")
    (list "scrubIntervalSecs" "scrub_interval_secs")
    (list "graceSecs" "grace_secs")
    (list "scrubBytesPerSec" "scrub_bytes_per_sec")
    (list "tempMaxAgeSecs" "temp_max_age_secs")
    (list "deletionIntervalSecs" "deletion_interval_secs")
    (list "deletionPageEntries" "deletion_page_entries")
    (list "scrubBatchFiles" "scrub_batch_files") -}}
{{- $out = append $out (list (printf "valkyrie.%s" (index $pair 0)) (index $pair 1) (index $v (index $pair 0)) "int") -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}
