#!/usr/bin/env bash
# cluster-demo.sh: a kubeadm node on podlab (scripts/cluster.sh up), the
# workloads of scripts/cluster/workloads.yaml on it, the streaming verbs
# through the apiserver, the kubelet and podlab (logs -f, exec -it,
# port-forward, debug), the Deployment deleted through podlab, then
# scripts/cluster.sh down and podlab's leak check. Prints what it does.
#
# Root. CLUSTER_DEMO_KEEP=1 leaves the node up at the end (no down).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/opt/podlab/bin
[ "$(id -u)" = 0 ] || { echo "cluster-demo.sh must run as root" >&2; exit 1; }
say() { printf '\n== %s\n' "$*"; }
t0=$EPOCHREALTIME
elapsed() { awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f s", b - a }'; }

pf_pid=
finish() {
  local rc=$?
  set +e
  [ -n "$pf_pid" ] && kill "$pf_pid" 2>/dev/null
  if [ $rc != 0 ]; then
    echo "cluster-demo: FAILED at $(elapsed); pods:" >&2
    kubectl get pods -A -o wide >&2
    kubectl get events -A --sort-by=.lastTimestamp 2>/dev/null | tail -20 >&2
    echo "-- client's init container (the Service by name):" >&2
    kubectl logs client -c wait-web --tail=20 >&2
    kubectl -n kube-system logs -l k8s-app=kube-dns --tail=10 >&2
  fi
  if [ -z "${CLUSTER_DEMO_KEEP:-}" ]; then
    scripts/cluster.sh down || rc=1
  fi
  exit $rc
}
trap finish EXIT

say "scripts/cluster.sh up"
admin=$(scripts/cluster.sh up)
k8s=$(scripts/build-k8s.sh)
kubectl() { "$k8s/kubectl" --kubeconfig "$admin" "$@"; }
echo "node up after $(elapsed); KUBECONFIG=$admin"
kubectl get nodes -o wide
echo "-- the control plane, kube-proxy and CoreDNS, as podlab sees them"
bin/podlab --config /var/lib/podlab-cluster/podlab.yaml pods

say "kubectl apply -f scripts/cluster/workloads.yaml"
kubectl apply -f scripts/cluster/workloads.yaml
kubectl rollout status deployment/web --timeout=180s
kubectl wait --for=condition=Ready pod/client --timeout=180s
kubectl wait --for=condition=Complete job/count --timeout=180s
kubectl get pods -o wide
kubectl get svc web

say "the client's init container reached the Service by its DNS name"
kubectl logs client -c wait-web
kubectl logs client -c app

say "from another pod: web.default.svc.cluster.local through CoreDNS and kube-proxy"
kubectl exec client -- nslookup web.default.svc.cluster.local
for _ in 1 2 3 4; do kubectl exec client -- wget -q -O - http://web/index.html | head -1; done

say "ConfigMap and Secret as env and volumes; probes"
pod=$(kubectl get pods -l app=web -o jsonpath='{.items[0].metadata.name}')
kubectl logs "$pod"
kubectl exec "$pod" -- sh -c 'echo "GREETING=$GREETING"; ls /config /secret; echo "secret file: $(cat /secret/token | wc -c) bytes"'
kubectl get pod "$pod" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {end}{"\n"}'
kubectl describe pod "$pod" | grep -E 'Liveness|Readiness'

say "kubectl logs -f job/count (follows until the Job's container exits)"
kubectl logs -f job/count

say "kubectl exec -it (a tty through the apiserver, the kubelet and podlab's streaming)"
script -qec "$k8s/kubectl --kubeconfig $admin exec -it client -- sh -c 'tty; echo cols \$(stty size)'" /dev/null | tr -d '\r'

say "kubectl port-forward pod/$pod 18080:8080"
kubectl port-forward "pod/$pod" 18080:8080 >/dev/null &
pf_pid=$!
for _ in $(seq 50); do curl -fs http://127.0.0.1:18080/index.html && break; sleep 0.2; done
kill "$pf_pid"; wait "$pf_pid" 2>/dev/null || true; pf_pid=

say "kubectl debug: an ephemeral container in client, in app's PID namespace"
kubectl debug client -q --image=registry.k8s.io/e2e-test-images/busybox:1.36.1-1 --target=app -c debugger -- sh -c 'ps; echo debug done'
for _ in $(seq 100); do
  [ "$(kubectl get pod client -o jsonpath='{.status.ephemeralContainerStatuses[0].state.terminated.reason}')" = Completed ] && break
  sleep 0.3
done
kubectl logs client -c debugger

say "kubectl delete deployment web: its pods go through podlab"
kubectl delete deployment web --wait=true
kubectl wait --for=delete pod -l app=web --timeout=120s
podlab_pods() { bin/podlab --config /var/lib/podlab-cluster/podlab.yaml pods; }
for _ in $(seq 100); do podlab_pods | grep -q ' web-' || break; sleep 0.3; done
if podlab_pods | grep ' web-'; then echo "cluster-demo: podlab still has web's sandboxes" >&2; exit 1; fi
echo "no sandbox of web left in podlab"
echo "workloads done after $(elapsed)"

if [ -n "${CLUSTER_DEMO_KEEP:-}" ]; then
  echo "node kept: KUBECONFIG=$admin; scripts/cluster.sh down removes it"
  exit 0
fi
trap - EXIT
say "scripts/cluster.sh down"
scripts/cluster.sh down
say "leak checks"
go run ./test/leakcheck
echo "cluster-demo: OK in $(elapsed)"
