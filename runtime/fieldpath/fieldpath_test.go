package fieldpath

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFormatMap(t *testing.T) {
	for _, tt := range []struct {
		in   map[string]string
		want string
	}{
		{nil, ""},
		{map[string]string{"b": "2", "a": "1"}, "a=\"1\"\nb=\"2\""},
		{map[string]string{"k": "tab\there \\ \"q\" \x00"}, `k="tab\there \\ \"q\" \x00"`},
	} {
		if got := FormatMap(tt.in); got != tt.want {
			t.Errorf("FormatMap(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestExtract(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "web", Namespace: "ns", UID: "u-1",
		Labels:      map[string]string{"app": "web", "tier": "front"},
		Annotations: map[string]string{"Example.com/Note": "hi"},
	}}
	for _, tt := range []struct {
		path, want, wantErr string
	}{
		{path: "metadata.uid", want: "u-1"},
		{path: "metadata.labels", want: "app=\"web\"\ntier=\"front\""},
		// Annotation keys are checked in lower case, and looked up as given.
		{path: "metadata.annotations['Example.com/Note']", want: "hi"},
		{path: "metadata.labels['bad key']", wantErr: "invalid key subscript in metadata.labels['bad key']"},
		{path: "metadata.name['x']", wantErr: `fieldPath "metadata.name['x']" does not support subscript`},
		{path: "status.podIP", wantErr: `unsupported fieldPath "status.podIP"`},
	} {
		got, err := Extract(pod, tt.path)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Extract(%q): error %v, want one containing %q", tt.path, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("Extract(%q): %v", tt.path, err)
		case got != tt.want:
			t.Errorf("Extract(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
}

func TestSplitMaybeSubscriptedPath(t *testing.T) {
	for _, tt := range []struct {
		in, path, key string
		ok            bool
	}{
		{"metadata.labels['a.b/c']", "metadata.labels", "a.b/c", true},
		{"metadata.labels['']", "metadata.labels", "", true},
		{"metadata.labels", "", "", false},
		{"['k']", "", "", false},
		{"metadata.labels['k'", "", "", false},
	} {
		path, key, ok := SplitMaybeSubscriptedPath(tt.in)
		if path != tt.path || key != tt.key || ok != tt.ok {
			t.Errorf("SplitMaybeSubscriptedPath(%q) = %q, %q, %v; want %q, %q, %v", tt.in, path, key, ok, tt.path, tt.key, tt.ok)
		}
	}
}
