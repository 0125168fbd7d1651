package kubeapi

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/podlab/podlab/internal/otlp"
)

// Marks are what the apiserver keeps of pod's life where no component has
// a span: its conditions' last transitions (PodScheduled, Initialized,
// ContainersReady, Ready ...), its containers' starts and exits, and its
// events (Scheduled, Pulling, Pulled, Created, Started ...), each with
// the resolution of its time.
func Marks(pod *corev1.Pod, events []corev1.Event) []otlp.Mark {
	var out []otlp.Mark
	for _, c := range pod.Status.Conditions {
		if c.LastTransitionTime.IsZero() {
			continue
		}
		out = append(out, otlp.Mark{Source: otlp.SourceCondition, Component: "pod",
			Name: fmt.Sprintf("%s=%s", c.Type, c.Status), Message: c.Message,
			Time: c.LastTransitionTime.Time, Resolution: time.Second})
	}
	statuses := append(append(append([]corev1.ContainerStatus(nil), pod.Status.InitContainerStatuses...),
		pod.Status.ContainerStatuses...), pod.Status.EphemeralContainerStatuses...)
	for _, cs := range statuses {
		// The first run's start and exit: the last termination when the
		// container restarted, then the current state.
		for _, st := range []corev1.ContainerState{cs.LastTerminationState, cs.State} {
			if r := st.Running; r != nil && !r.StartedAt.IsZero() {
				out = append(out, otlp.Mark{Source: otlp.SourceStatus, Component: "pod",
					Name: cs.Name + " running", Time: r.StartedAt.Time, Resolution: time.Second})
			}
			if t := st.Terminated; t != nil {
				if !t.StartedAt.IsZero() {
					out = append(out, otlp.Mark{Source: otlp.SourceStatus, Component: "pod",
						Name: cs.Name + " started", Time: t.StartedAt.Time, Resolution: time.Second})
				}
				if !t.FinishedAt.IsZero() {
					out = append(out, otlp.Mark{Source: otlp.SourceStatus, Component: "pod",
						Name: fmt.Sprintf("%s exited %d (%s)", cs.Name, t.ExitCode, t.Reason), Time: t.FinishedAt.Time, Resolution: time.Second})
				}
			}
		}
	}
	for _, e := range events {
		m := otlp.Mark{Source: otlp.SourceEvent, Component: reporter(e), Name: e.Reason, Message: e.Message}
		switch {
		case !e.EventTime.IsZero():
			m.Time, m.Resolution = e.EventTime.Time, time.Microsecond
		case !e.FirstTimestamp.IsZero():
			m.Time, m.Resolution = e.FirstTimestamp.Time, time.Second
		default:
			continue
		}
		if e.Count > 1 {
			m.Name = fmt.Sprintf("%s (×%d, last %s)", e.Reason, e.Count, e.LastTimestamp.UTC().Format(time.TimeOnly))
		}
		out = append(out, m)
	}
	return out
}

// reporter is who recorded the event: its reportingComponent (the events
// API), else its source (the core API's).
func reporter(e corev1.Event) string {
	if e.ReportingController != "" {
		return e.ReportingController
	}
	if e.Source.Component != "" {
		return e.Source.Component
	}
	return "event"
}
