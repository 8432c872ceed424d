#!/usr/bin/env bash
# Smoke test of the real control plane built by `make controlplane`: embedded etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and kwok, all on 127.0.0.1, with
# throwaway certificates in a temporary directory that is removed at the end (KEEP=1 keeps it).
#
#   controlplane/smoke.sh [PATH-TO-nodefence-controlplane]
#
# Steps: a Node managed by kwok becomes Ready; a Deployment's pod becomes Running on it; kwok
# stops managing the node (its label removed) and the node-lifecycle controller marks it
# Unknown; a pod deleted then stays Terminating, and podgc leaves it alone; the out-of-service
# taint makes podgc delete it. Prints one PASS or FAIL line per step; exits non-zero on a FAIL.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
BIN=${1:-${NODEFENCE_CONTROLPLANE:-}}
if [[ -z "$BIN" ]]; then
	BIN=$(make -s -C "$root" controlplane | tail -n 1)
fi
[[ -x "$BIN" ]] || { echo "smoke: no binary at '$BIN'" >&2; exit 2; }
if [[ -z "${KUBECTL:-}" ]]; then
	if [[ -x "$root/.venv/bin/kubectl" ]]; then KUBECTL=$root/.venv/bin/kubectl; else KUBECTL=kubectl; fi
fi
# Shorter than Kubernetes' default of 50s, so the test does not wait long for NotReady.
GRACE=${GRACE:-20s}

work=$(mktemp -d /tmp/nodefence-controlplane-smoke.XXXXXX)
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	if [[ "${KEEP:-0}" == 1 ]]; then echo "smoke: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

failed=0
t0=$SECONDS
step() { echo "PASS [$((SECONDS - t0))s] $*"; }
fail() {
	echo "FAIL [$((SECONDS - t0))s] $*"
	failed=1
}
die() {
	fail "$@"
	for f in "$work"/*.log; do echo "--- tail $f"; tail -n 20 "$f"; done
	exit 1
}
# wait_for SECONDS DESCRIPTION COMMAND...: retry COMMAND once a second until it succeeds.
wait_for() {
	local limit=$1 what=$2
	shift 2
	local end=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < end)) || return 1
		sleep 1
	done
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Certificates: a CA, the apiserver's serving certificate, the service-account signing key.
cd "$work"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=nodefence-test-ca" \
	-keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key \
	-out apiserver.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' >apiserver.ext
openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
	-extfile apiserver.ext -out apiserver.crt 2>/dev/null
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
token=$(openssl rand -hex 16)
echo "$token,admin,admin,system:masters" >tokens.csv
step "certificates and admin token in $work"

etcd_port=$(free_port)
api_port=$(free_port)
kcm_port=$(free_port)
sched_port=$(free_port)

"$BIN" etcd --data-dir="$work/etcd" --listen-client-urls="http://127.0.0.1:$etcd_port" \
	--unsafe-no-fsync >etcd.log 2>&1 &
pids+=($!)
wait_for 60 etcd grep -q "etcd: ready" etcd.log || die "etcd ready"
step "etcd ready on 127.0.0.1:$etcd_port"

"$BIN" apiserver \
	--etcd-servers="http://127.0.0.1:$etcd_port" \
	--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
	--tls-cert-file=apiserver.crt --tls-private-key-file=apiserver.key \
	--client-ca-file=ca.crt \
	--token-auth-file=tokens.csv \
	--authorization-mode=Node,RBAC \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file=sa.pub --service-account-signing-key-file=sa.key \
	--service-cluster-ip-range=10.96.0.0/16 \
	--allow-privileged=true \
	>apiserver.log 2>&1 &
pids+=($!)
wait_for 120 apiserver curl -sf --cacert ca.crt -H "Authorization: Bearer $token" \
	"https://127.0.0.1:$api_port/readyz" || die "kube-apiserver ready"
step "kube-apiserver ready on https://127.0.0.1:$api_port"

cat >kubeconfig <<EOF
apiVersion: v1
kind: Config
clusters:
- name: smoke
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $work/ca.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: smoke
  context: {cluster: smoke, user: admin}
current-context: smoke
EOF
export KUBECONFIG=$work/kubeconfig
k() { "$KUBECTL" "$@"; }
k version 2>/dev/null | sed 's/^/  /' || true

"$BIN" controller-manager \
	--kubeconfig="$work/kubeconfig" \
	--authentication-kubeconfig="$work/kubeconfig" --authorization-kubeconfig="$work/kubeconfig" \
	--bind-address=127.0.0.1 --secure-port="$kcm_port" \
	--controllers='*' \
	--leader-elect=false \
	--root-ca-file=ca.crt --service-account-private-key-file=sa.key \
	--node-monitor-grace-period="$GRACE" \
	>controller-manager.log 2>&1 &
pids+=($!)
"$BIN" scheduler \
	--kubeconfig="$work/kubeconfig" \
	--authentication-kubeconfig="$work/kubeconfig" --authorization-kubeconfig="$work/kubeconfig" \
	--bind-address=127.0.0.1 --secure-port="$sched_port" \
	--leader-elect=false \
	>scheduler.log 2>&1 &
pids+=($!)
"$BIN" kwok \
	--kubeconfig="$work/kubeconfig" \
	--manage-all-nodes=false \
	--manage-nodes-with-label-selector=kwok.x-k8s.io/node=fake \
	--node-lease-duration-seconds=40 \
	--cidr=10.0.0.1/24 --node-ip=10.0.0.1 \
	>kwok.log 2>&1 &
pids+=($!)
wait_for 60 kcm curl -skf "https://127.0.0.1:$kcm_port/healthz" || die "kube-controller-manager healthy"
step "kube-controller-manager healthy on 127.0.0.1:$kcm_port"
wait_for 60 scheduler curl -skf "https://127.0.0.1:$sched_port/healthz" || die "kube-scheduler healthy"
step "kube-scheduler healthy on 127.0.0.1:$sched_port"

node=kwok-node-0
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $node
  labels:
    kubernetes.io/hostname: $node
    kubernetes.io/os: linux
    kwok.x-k8s.io/node: fake
  annotations:
    node.alpha.kubernetes.io/ttl: "0"
spec:
  providerID: kwok://$node
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "110"}
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
  nodeInfo:
    bootID: 00000000-0000-0000-0000-000000000001
    kubeletVersion: fake
EOF
k wait --for=condition=Ready "node/$node" --timeout=60s >/dev/null || die "node $node Ready"
step "node $node Ready (kwok)"
k -n kube-node-lease get lease "$node" -o jsonpath='  lease renewTime={.spec.renewTime}{"\n"}'

wait_for 60 sa k -n default get serviceaccount default || die "default service account"
k -n default apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: smoke
spec:
  replicas: 1
  selector: {matchLabels: {app: smoke}}
  template:
    metadata: {labels: {app: smoke}}
    spec:
      nodeSelector: {kubernetes.io/hostname: $node}
      containers:
      - name: app
        image: fake.invalid/smoke:1
EOF
running() { [[ $(k -n default get pods -l app=smoke -o jsonpath='{.items[*].status.phase}') == Running ]]; }
wait_for 90 pod running || die "Deployment's pod Running on $node"
pod=$(k -n default get pods -l app=smoke -o jsonpath='{.items[0].metadata.name}')
step "pod $pod Running on $(k -n default get pod "$pod" -o jsonpath='{.spec.nodeName}')"

# The node dies: kwok no longer acts as its kubelet, the Lease is no longer renewed.
k label node "$node" kwok.x-k8s.io/node- >/dev/null
unknown() { [[ $(k get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == Unknown ]]; }
wait_for 120 node-unknown unknown || die "node $node Ready=Unknown after kwok stopped"
step "node $node Ready=Unknown (node-lifecycle controller, grace $GRACE); taints: $(k get node "$node" -o jsonpath='{range .spec.taints[*]}{.key}:{.effect} {end}')"

k -n default delete pod "$pod" --wait=false >/dev/null
sleep 45 # more than two of podgc's 20s periods
if [[ -n $(k -n default get pod "$pod" -o jsonpath='{.metadata.deletionTimestamp}' 2>/dev/null) ]]; then
	step "pod $pod stays Terminating after delete --wait=false (45s; podgc leaves it)"
else
	fail "pod $pod stays Terminating after delete --wait=false"
fi

k taint node "$node" node.kubernetes.io/out-of-service=nodeshutdown:NoExecute >/dev/null
gone() { ! k -n default get pod "$pod" >/dev/null 2>&1; }
if wait_for 90 pod-gone gone; then
	step "out-of-service taint: podgc deleted pod $pod"
else
	fail "out-of-service taint: podgc deleted pod $pod"
fi

if ((failed)); then
	for f in "$work"/*.log; do echo "--- tail $f"; tail -n 20 "$f"; done
	exit 1
fi
echo "smoke: all steps passed in $((SECONDS - t0))s"
