// Package otlp owns podlab's OpenTelemetry traces: the OTLP/gRPC receiver
// the kube-apiserver, the kubelet and etcd export their spans to, the
// bounded on-disk span store indexed by pod, the exporter that sends spans
// on to a user's collector (Jaeger, Tempo), and the waterfall that merges
// every component's spans for one pod.
//
// The wire types are go.opentelemetry.io/proto/otlp's; on disk and in
// memory a span is the flat Span below, which is what the store indexes
// and the waterfall orders.
package otlp

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Span is one span as podlab keeps it: ids in lowercase hex (as W3C
// traceparent writes them), the service that emitted it, and its
// attributes as strings.
type Span struct {
	TraceID  string            `json:"traceId"`
	SpanID   string            `json:"spanId"`
	ParentID string            `json:"parentSpanId,omitempty"`
	Service  string            `json:"service"`
	Name     string            `json:"name"`
	Kind     string            `json:"kind,omitempty"` // server, client, internal, producer, consumer
	Start    time.Time         `json:"start"`
	End      time.Time         `json:"end"`
	Error    string            `json:"error,omitempty"`
	Attrs    map[string]string `json:"attrs,omitempty"`
}

// Duration is End - Start.
func (s Span) Duration() time.Duration { return s.End.Sub(s.Start) }

// SpanContext is the part of a span another process needs to parent its
// own spans on it: what a W3C traceparent carries.
type SpanContext struct {
	TraceID string
	SpanID  string
	Sampled bool
}

// Valid says both ids are set.
func (sc SpanContext) Valid() bool { return sc.TraceID != "" && sc.SpanID != "" }

// ParseTraceparent parses a W3C trace-context traceparent header
// (version 00: "00-<32 hex trace id>-<16 hex span id>-<2 hex flags>"), as
// the kubelet's otelgrpc client sends it in the gRPC metadata of each CRI
// call.
func ParseTraceparent(v string) (SpanContext, error) {
	parts := strings.Split(strings.TrimSpace(v), "-")
	if len(parts) < 4 {
		return SpanContext{}, fmt.Errorf("traceparent %q: want version-traceid-spanid-flags", v)
	}
	ver, tid, sid, flags := parts[0], parts[1], parts[2], parts[3]
	if len(ver) != 2 || !isHex(ver) || ver == "ff" || (ver == "00" && len(parts) != 4) {
		return SpanContext{}, fmt.Errorf("traceparent %q: bad version", v)
	}
	if len(tid) != 32 || !isHex(tid) || allZero(tid) {
		return SpanContext{}, fmt.Errorf("traceparent %q: bad trace id", v)
	}
	if len(sid) != 16 || !isHex(sid) || allZero(sid) {
		return SpanContext{}, fmt.Errorf("traceparent %q: bad span id", v)
	}
	if len(flags) != 2 || !isHex(flags) {
		return SpanContext{}, fmt.Errorf("traceparent %q: bad flags", v)
	}
	f, _ := hex.DecodeString(flags)
	return SpanContext{TraceID: tid, SpanID: sid, Sampled: f[0]&1 == 1}, nil
}

// Traceparent is sc as a W3C traceparent header.
func (sc SpanContext) Traceparent() string {
	flags := "00"
	if sc.Sampled {
		flags = "01"
	}
	return "00-" + sc.TraceID + "-" + sc.SpanID + "-" + flags
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool { return strings.Trim(s, "0") == "" }

// NewTraceID and NewSpanID are random ids, as the OTel SDK makes them.
func NewTraceID() string { return randomHex(16) }

// NewSpanID is a random span id.
func NewSpanID() string { return randomHex(8) }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Attributes podlab's own spans carry, and those of the kubelet's (its
// syncPod spans use the OTel semantic conventions k8s.pod.uid,
// k8s.pod.name, k8s.namespace.name and its own "k8s.pod" = "ns/name").
const (
	AttrPodUID      = "k8s.pod.uid"
	AttrPodName     = "k8s.pod.name"
	AttrNamespace   = "k8s.namespace.name"
	AttrPodKey      = "k8s.pod" // the kubelet's klog.KObj: "ns/name"
	AttrSandboxID   = "podlab.sandbox.id"
	AttrContainer   = "k8s.container.name"
	AttrRPCMethod   = "rpc.method"
	AttrRPCService  = "rpc.service"
	AttrRPCSystem   = "rpc.system"
	AttrHTTPMethod  = "http.method"
	AttrHTTPMethod2 = "http.request.method" // semconv >= 1.21
	attrHTTPTarget  = "http.target"
	attrURLPath     = "url.path"
	attrHTTPURL     = "http.url"
	attrURLFull     = "url.full"
	// The apiserver's storage spans (Create etcd3, GuaranteedUpdate etcd3)
	// name the object they write by its etcd key: /pods/NS/NAME,
	// /replicasets/NS/NAME. A create's URL names no object; its key does.
	attrStorageKey      = "key"
	attrStorageResource = "resource"
	ServiceName         = "service.name"
	PodlabService       = "podlab"
	keyPod              = "pod:"
	keyUID              = "uid:"
	keySandbox          = "sandbox:"
	keyCreate           = "create:"
	keyLinkedObjects    = "obj:"
)

// Keys are the index keys of s: what it names of a pod.
//
//	pod:NS/NAME       from k8s.namespace.name + k8s.pod.name, k8s.pod, or an
//	                  apiserver request URL .../namespaces/NS/pods/NAME[/sub]
//	uid:UID           from k8s.pod.uid
//	sandbox:ID        from podlab.sandbox.id
//	create:NS/RES     an apiserver POST to .../namespaces/NS/RES (pods,
//	                  replicasets, deployments): a create, whose URL names
//	                  no object
//	obj:NS/RES/NAME   an apiserver request on a named replicaset or
//	                  deployment
//
// An apiserver storage span's etcd key (/pods/NS/NAME, /RES/NS/NAME) names
// its object as a URL does: pod: or obj:.
func Keys(s Span) []string {
	var keys []string
	a := s.Attrs
	if ns, name := a[AttrNamespace], a[AttrPodName]; ns != "" && name != "" {
		keys = append(keys, keyPod+ns+"/"+name)
	} else if k := a[AttrPodKey]; strings.Count(k, "/") == 1 {
		keys = append(keys, keyPod+k)
	}
	if uid := a[AttrPodUID]; uid != "" {
		keys = append(keys, keyUID+uid)
	}
	if id := a[AttrSandboxID]; id != "" {
		keys = append(keys, keySandbox+id)
	}
	if res, ns, name, ok := storageKey(a); ok {
		if res == "pods" {
			keys = append(keys, keyPod+ns+"/"+name)
		} else {
			keys = append(keys, keyLinkedObjects+ns+"/"+res+"/"+name)
		}
	}
	if r, ok := ParseRequest(s); ok {
		switch {
		case r.Resource == "pods" && r.Name != "":
			keys = append(keys, keyPod+r.Namespace+"/"+r.Name)
		case r.Name != "":
			keys = append(keys, keyLinkedObjects+r.Namespace+"/"+r.Resource+"/"+r.Name)
		case r.Verb == "POST":
			keys = append(keys, keyCreate+r.Namespace+"/"+r.Resource)
		}
	}
	return dedup(keys)
}

// storageKey reads a namespaced object's etcd key, /RES/NS/NAME, of a
// storage span whose resource attribute agrees with it.
func storageKey(a map[string]string) (res, ns, name string, ok bool) {
	res = a[attrStorageResource]
	seg := strings.Split(strings.TrimPrefix(a[attrStorageKey], "/"), "/")
	if res == "" || len(seg) != 3 || seg[0] != res || seg[1] == "" || seg[2] == "" {
		return "", "", "", false
	}
	return res, seg[1], seg[2], true
}

func dedup(keys []string) []string {
	seen := map[string]bool{}
	out := keys[:0]
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// Request is what an apiserver request span's URL says: a namespaced
// resource of core/v1 (/api/v1/namespaces/NS/RES[/NAME[/SUB]]) or of a
// group (/apis/GROUP/VERSION/namespaces/NS/RES[/NAME[/SUB]]).
type Request struct {
	Verb, Namespace, Resource, Name, Subresource string
}

// ParseRequest reads the request of an HTTP server span (otelhttp's
// http.target or url.path, or a full URL), if it names a namespaced
// resource.
func ParseRequest(s Span) (Request, bool) {
	a := s.Attrs
	p := a[attrURLPath]
	if p == "" {
		p = a[attrHTTPTarget]
	}
	if p == "" {
		for _, k := range []string{attrURLFull, attrHTTPURL} {
			if u, err := url.Parse(a[k]); err == nil && u.Path != "" {
				p = u.Path
				break
			}
		}
	}
	p, _, _ = strings.Cut(p, "?")
	if p == "" {
		return Request{}, false
	}
	seg := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case len(seg) >= 2 && seg[0] == "api":
		seg = seg[2:]
	case len(seg) >= 3 && seg[0] == "apis":
		seg = seg[3:]
	default:
		return Request{}, false
	}
	if len(seg) < 3 || seg[0] != "namespaces" {
		return Request{}, false
	}
	r := Request{Verb: strings.ToUpper(a[AttrHTTPMethod]), Namespace: seg[1], Resource: seg[2]}
	if r.Verb == "" {
		r.Verb = strings.ToUpper(a[AttrHTTPMethod2])
	}
	if len(seg) > 3 {
		r.Name = seg[3]
	}
	if len(seg) > 4 {
		r.Subresource = seg[4]
	}
	return r, true
}
