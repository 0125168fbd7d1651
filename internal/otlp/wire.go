package otlp

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// FromRequest flattens an Export request into spans. A span without a
// valid trace or span id is dropped, and counted in rejected.
func FromRequest(req *coltracepb.ExportTraceServiceRequest) (spans []Span, rejected int64) {
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		service := res[ServiceName]
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s, ok := fromProto(sp, service)
				if !ok {
					rejected++
					continue
				}
				// Resource attributes (the node, the pod the apiserver
				// runs in) under the span's own.
				for k, v := range res {
					if _, set := s.Attrs[k]; !set && k != ServiceName {
						if s.Attrs == nil {
							s.Attrs = map[string]string{}
						}
						s.Attrs[k] = v
					}
				}
				spans = append(spans, s)
			}
		}
	}
	return spans, rejected
}

func fromProto(sp *tracepb.Span, service string) (Span, bool) {
	if len(sp.GetTraceId()) != 16 || len(sp.GetSpanId()) != 8 {
		return Span{}, false
	}
	s := Span{
		TraceID: hex.EncodeToString(sp.TraceId),
		SpanID:  hex.EncodeToString(sp.SpanId),
		Service: service,
		Name:    sp.GetName(),
		Kind:    kindName(sp.GetKind()),
		Start:   time.Unix(0, int64(sp.GetStartTimeUnixNano())).UTC(),
		End:     time.Unix(0, int64(sp.GetEndTimeUnixNano())).UTC(),
		Attrs:   attrs(sp.GetAttributes()),
	}
	if len(sp.GetParentSpanId()) == 8 {
		s.ParentID = hex.EncodeToString(sp.ParentSpanId)
	}
	if st := sp.GetStatus(); st.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		s.Error = st.GetMessage()
		if s.Error == "" {
			s.Error = "error"
		}
	}
	if s.End.Before(s.Start) {
		s.End = s.Start
	}
	return s, true
}

func kindName(k tracepb.Span_SpanKind) string {
	switch k {
	case tracepb.Span_SPAN_KIND_SERVER:
		return "server"
	case tracepb.Span_SPAN_KIND_CLIENT:
		return "client"
	case tracepb.Span_SPAN_KIND_PRODUCER:
		return "producer"
	case tracepb.Span_SPAN_KIND_CONSUMER:
		return "consumer"
	case tracepb.Span_SPAN_KIND_INTERNAL:
		return "internal"
	}
	return ""
}

func kindProto(k string) tracepb.Span_SpanKind {
	switch k {
	case "server":
		return tracepb.Span_SPAN_KIND_SERVER
	case "client":
		return tracepb.Span_SPAN_KIND_CLIENT
	case "producer":
		return tracepb.Span_SPAN_KIND_PRODUCER
	case "consumer":
		return tracepb.Span_SPAN_KIND_CONSUMER
	case "internal":
		return tracepb.Span_SPAN_KIND_INTERNAL
	}
	return tracepb.Span_SPAN_KIND_UNSPECIFIED
}

// attrs renders attribute values as strings: the store and the
// waterfall only match and show them.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = valueString(kv.GetValue())
	}
	return m
}

func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_BytesValue:
		return hex.EncodeToString(x.BytesValue)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, valueString(e))
		}
		return "[" + strings.Join(parts, ",") + "]"
	case *commonpb.AnyValue_KvlistValue:
		var parts []string
		for _, kv := range x.KvlistValue.GetValues() {
			parts = append(parts, kv.GetKey()+"="+valueString(kv.GetValue()))
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	return ""
}

// ToRequest groups spans by service into an Export request.
func ToRequest(spans []Span) (*coltracepb.ExportTraceServiceRequest, error) {
	byService := map[string]*tracepb.ResourceSpans{}
	req := &coltracepb.ExportTraceServiceRequest{}
	for _, s := range spans {
		sp, err := toProto(s)
		if err != nil {
			return nil, err
		}
		rs := byService[s.Service]
		if rs == nil {
			rs = &tracepb.ResourceSpans{
				Resource:   &resourcepb.Resource{Attributes: []*commonpb.KeyValue{stringKV(ServiceName, s.Service)}},
				ScopeSpans: []*tracepb.ScopeSpans{{Scope: &commonpb.InstrumentationScope{Name: "podlab"}}},
			}
			byService[s.Service] = rs
			req.ResourceSpans = append(req.ResourceSpans, rs)
		}
		rs.ScopeSpans[0].Spans = append(rs.ScopeSpans[0].Spans, sp)
	}
	return req, nil
}

func toProto(s Span) (*tracepb.Span, error) {
	tid, err := hex.DecodeString(s.TraceID)
	if err != nil || len(tid) != 16 {
		return nil, fmt.Errorf("span %q: trace id %q: want 32 hex digits", s.Name, s.TraceID)
	}
	sid, err := hex.DecodeString(s.SpanID)
	if err != nil || len(sid) != 8 {
		return nil, fmt.Errorf("span %q: span id %q: want 16 hex digits", s.Name, s.SpanID)
	}
	sp := &tracepb.Span{
		TraceId:           tid,
		SpanId:            sid,
		Name:              s.Name,
		Kind:              kindProto(s.Kind),
		StartTimeUnixNano: uint64(s.Start.UnixNano()),
		EndTimeUnixNano:   uint64(s.End.UnixNano()),
	}
	if s.ParentID != "" {
		pid, err := hex.DecodeString(s.ParentID)
		if err != nil || len(pid) != 8 {
			return nil, fmt.Errorf("span %q: parent span id %q: want 16 hex digits", s.Name, s.ParentID)
		}
		sp.ParentSpanId = pid
	}
	for k, v := range s.Attrs {
		sp.Attributes = append(sp.Attributes, stringKV(k, v))
	}
	if s.Error != "" {
		sp.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: s.Error}
	}
	return sp, nil
}

func stringKV(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}
