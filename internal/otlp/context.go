package otlp

import "context"

type parentKey struct{}

// ContextWithParent returns ctx carrying the remote span a call came
// under (the kubelet's CRI client span, from the call's traceparent).
func ContextWithParent(ctx context.Context, sc SpanContext) context.Context {
	return context.WithValue(ctx, parentKey{}, sc)
}

// ParentFromContext is the remote span ctx carries, or the zero
// SpanContext.
func ParentFromContext(ctx context.Context) SpanContext {
	sc, _ := ctx.Value(parentKey{}).(SpanContext)
	return sc
}
