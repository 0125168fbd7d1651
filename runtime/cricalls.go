package runtime

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/otlp"
	"github.com/podlab/podlab/internal/trace"
)

// criCallsFile, in a pod's state dir, holds the CRI calls a client made on
// the pod, one JSON object a line, as `podlab serve` received them.
const criCallsFile = "cri-calls.jsonl"

// maxCRICalls bounds a pod's file: the kubelet polls a running pod's status
// for as long as it runs, and the first calls are the ones worth keeping.
const maxCRICallsBytes = 256 << 10

// criCall is one line of criCallsFile.
type criCall struct {
	Method string    `json:"method"`
	Detail string    `json:"detail,omitempty"` // a container's name, an image
	Start  time.Time `json:"start"`
	Dur    int64     `json:"durationNs"`
	Err    string    `json:"error,omitempty"`
}

// CallLog records, for `podlab serve`, the CRI calls made on each pod
// (cri.CallRecorder): the call's pod comes from its request (a pod or
// container id, PullImage's sandbox config) or response (RunPodSandbox).
// An ImageStatus names no pod: it is held and recorded on the pod of the
// next call that names an image (CreateContainer or PullImage), which is
// how the kubelet makes them, one after the other, for each container; with
// several pods starting at once such a call may land on another of them.
type CallLog struct {
	r       *Runtime
	mu      sync.Mutex
	pending []criCall // ImageStatus calls, held for the next image's pod
	// containers maps the full ids of the containers created through this
	// server to what a call on one names, so Before need not read the
	// pod's record for each: an id and its pod and name never change.
	containers map[string]callOn
}

// maxContainers bounds CallLog.containers: pods removed whole leave their
// containers' entries, which the store lookup replaces when dropped.
const maxContainers = 4096

// maxPending bounds the ImageStatus calls held for a pod; older ones drop.
const maxPending = 16

// NewCallLog returns the call log of r's pods.
func (r *Runtime) NewCallLog() *CallLog { return &CallLog{r: r} }

// Before finds the pod and container a call names (the token).
func (l *CallLog) Before(_ context.Context, method string, req any) any {
	switch q := req.(type) {
	case interface{ GetPodSandboxId() string }:
		return callOn{pod: l.r.podID(q.GetPodSandboxId())}
	case interface{ GetContainerId() string }:
		if on, ok := l.container(q.GetContainerId()); ok {
			return on
		}
		if p, c, err := l.r.Store.ContainerByID(q.GetContainerId()); err == nil {
			return callOn{pod: p.ID, container: c.Name}
		}
	case *runtimeapi.PullImageRequest:
		if md := q.GetSandboxConfig().GetMetadata(); md != nil {
			if p, err := l.r.Store.Find(md.Namespace, md.Name); err == nil {
				return callOn{pod: p.ID}
			}
		}
	}
	return callOn{}
}

// callOn is what a call names: a pod, and a container of it.
type callOn struct{ pod, container string }

// After records the call on its pod (RunPodSandbox's from its response),
// and gives it to the runtime's span sink, if any (see callSpans).
func (l *CallLog) After(ctx context.Context, method string, token, req, resp any, start time.Time, d time.Duration, err error) {
	c := criCall{Method: method, Start: start, Dur: int64(d)}
	if err != nil {
		c.Err = err.Error()
	}
	on, _ := token.(callOn)
	podID := on.pod
	c.Detail = on.container
	var image string
	create := false
	if l.r.Spans != nil {
		defer func() { l.r.exportCall(ctx, podID, req, c) }()
	}
	switch q := req.(type) {
	case *runtimeapi.RunPodSandboxRequest:
		create = true
		if rs, ok := resp.(*runtimeapi.RunPodSandboxResponse); ok && rs != nil {
			podID = rs.PodSandboxId
		}
	case *runtimeapi.CreateContainerRequest:
		c.Detail = q.GetConfig().GetMetadata().GetName()
		image = q.GetConfig().GetImage().GetImage()
		if rs, ok := resp.(*runtimeapi.CreateContainerResponse); ok && rs != nil && podID != "" {
			l.remember(rs.ContainerId, callOn{pod: podID, container: c.Detail})
		}
	case *runtimeapi.RemoveContainerRequest:
		if err == nil {
			l.forget(q.GetContainerId())
		}
	case *runtimeapi.PullImageRequest:
		c.Detail, image = q.GetImage().GetImage(), q.GetImage().GetImage()
	case *runtimeapi.ImageStatusRequest:
		c.Detail = q.GetImage().GetImage()
		l.hold(c.Detail, c)
		return
	}
	if podID == "" {
		return
	}
	calls := []criCall{c}
	if image != "" {
		calls = append(l.take(), c)
	}
	l.r.appendCalls(podID, calls, create)
}

func (l *CallLog) container(id string) (callOn, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	on, ok := l.containers[id]
	return on, ok
}

func (l *CallLog) remember(id string, on callOn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.containers == nil || len(l.containers) >= maxContainers {
		l.containers = map[string]callOn{}
	}
	l.containers[id] = on
}

func (l *CallLog) forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.containers, id)
}

func (l *CallLog) hold(image string, c criCall) {
	c.Detail = image
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = append(l.pending, c)
	if len(l.pending) > maxPending {
		l.pending = l.pending[len(l.pending)-maxPending:]
	}
}

func (l *CallLog) take() []criCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.pending
	l.pending = nil
	return out
}

// exportCall gives call c, made on pod podID, to r.Spans as OTLP spans:
// the call as a server span under the client's span when the call came
// with a traceparent, and the operation's stages (those merged into the
// ctx's recorder) under it. Calls on no pod and without a client span (the
// kubelet's Version, Status and list polling) are left out.
func (r *Runtime) exportCall(ctx context.Context, podID string, req any, c criCall) {
	parent := otlp.ParentFromContext(ctx)
	attrs := map[string]string{}
	if md := requestPod(req); md != nil {
		attrs[otlp.AttrPodName], attrs[otlp.AttrNamespace], attrs[otlp.AttrPodUID] = md.Name, md.Namespace, md.Uid
	}
	if podID != "" {
		attrs[otlp.AttrSandboxID] = podID
		if p, err := r.Store.PodByID(podID); err == nil {
			attrs[otlp.AttrPodName], attrs[otlp.AttrNamespace], attrs[otlp.AttrPodUID] = p.Name, p.Namespace, p.UID
		}
	} else if attrs[otlp.AttrPodName] == "" && !(parent.Valid() && strings.Contains(c.Method, "Image")) {
		// An image call of a traced pod start is kept: its trace
		// ties it to the pod.
		return
	}
	if c.Detail != "" && c.Method != "PullImage" && c.Method != "ImageStatus" {
		attrs[otlp.AttrContainer] = c.Detail
	}
	rec := trace.FromContext(ctx)
	call := otlp.Call{Method: c.Method, Detail: c.Detail, Start: c.Start, Dur: time.Duration(c.Dur), Err: c.Err,
		Parent: parent, Attrs: attrs, Stages: rec.Spans()}
	if rec != nil {
		call.Begin = rec.Begin()
	}
	if err := r.Spans.Add(otlp.CallSpans(call)); err != nil {
		slog.Warn("keeping the spans of a CRI call", "method", c.Method, "error", err)
	}
}

// requestPod is the pod a request's sandbox config names (RunPodSandbox,
// PullImage), or nil.
func requestPod(req any) *runtimeapi.PodSandboxMetadata {
	switch q := req.(type) {
	case *runtimeapi.RunPodSandboxRequest:
		return q.GetConfig().GetMetadata()
	case *runtimeapi.PullImageRequest:
		return q.GetSandboxConfig().GetMetadata()
	case *runtimeapi.CreateContainerRequest:
		return q.GetSandboxConfig().GetMetadata()
	}
	return nil
}

// podID is the full id of the pod whose id is or starts with id, or "".
func (r *Runtime) podID(id string) string {
	if id == "" {
		return ""
	}
	p, err := r.Store.PodByID(id)
	if err != nil {
		return ""
	}
	return p.ID
}

// appendCalls adds calls to pod id's file. Only RunPodSandbox creates the
// file: a call that returns after the pod's removal must not put a file
// back into the directory being removed.
func (r *Runtime) appendCalls(id string, calls []criCall, create bool) {
	flags := os.O_WRONLY | os.O_APPEND | unix.O_NOFOLLOW
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(filepath.Join(r.Store.PodDir(id), criCallsFile), flags, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() > maxCRICallsBytes {
		return
	}
	var b strings.Builder
	for _, c := range calls {
		j, _ := json.Marshal(c)
		b.Write(j)
		b.WriteByte('\n')
	}
	f.WriteString(b.String())
}

// CRICallSpans are the CRI calls made on pod id through `podlab serve`, as
// spans on the pod's time line (offsets from its creation; the first call,
// RunPodSandbox, starts a little before it), named "CRI <method>
// [detail]". None when the pod was not made through serve.
func (r *Runtime) CRICallSpans(id string) ([]trace.Span, error) {
	p, err := r.Store.PodByID(id)
	if err != nil {
		return nil, notFound(err)
	}
	f, err := os.Open(filepath.Join(r.Store.PodDir(p.ID), criCallsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var spans []trace.Span
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c criCall
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("%s: %w", criCallsFile, err)
		}
		name := "CRI " + c.Method
		if c.Detail != "" {
			name += " " + c.Detail
		}
		spans = append(spans, trace.Span{Name: name, Start: c.Start.Sub(p.Created), Dur: time.Duration(c.Dur), Err: c.Err})
	}
	return spans, sc.Err()
}

// PodTrace is pod id's trace: its stored spans and, for a pod made through
// `podlab serve`, the client's CRI calls, each operation's spans under the
// call that ran it, all shifted so that the first starts at 0.
func (r *Runtime) PodTrace(id string) ([]trace.Span, error) {
	p, err := r.Store.PodByID(id)
	if err != nil {
		return nil, notFound(err)
	}
	calls, err := r.CRICallSpans(p.ID)
	if err != nil {
		return nil, err
	}
	spans := append([]trace.Span(nil), p.Spans...)
	for i := range spans {
		s := &spans[i]
		if s.Parent != "" {
			continue
		}
		for _, c := range calls {
			// The operation "CreateContainer app" ran inside the call
			// "CRI CreateContainer app".
			if strings.HasPrefix(c.Name, "CRI "+s.Name) && c.Start <= s.Start && s.Start+s.Dur <= c.Start+c.Dur {
				s.Parent = c.Name
				break
			}
		}
	}
	spans = append(spans, calls...)
	var first time.Duration
	for _, s := range spans {
		first = min(first, s.Start)
	}
	for i := range spans {
		spans[i].Start -= first
	}
	trace.Sort(spans)
	return spans, nil
}
