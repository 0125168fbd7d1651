package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	_ "embed"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/manifest"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/env"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/inspect"
	"github.com/podlab/podlab/runtime/kubelet"
)

//go:embed demo-pod.yaml
var demoPod []byte

// What the demo pod needs from the outside (see demo-pod.yaml).
const (
	demoImage      = "podlab-demo:latest"
	demoServerName = "podlab-demo.default.svc" // the server certificate's DNS name
	demoClient     = "client"
	demoPKIVolume  = "pki"
	demoHookPath   = "/etc/podlab-demo/hook.txt"
	// The client prints one of these after its TLS request.
	demoTLSOK     = "TLS request: OK"
	demoTLSFailed = "TLS request: FAILED"
)

func newDemoCmd(g *globalFlags) *cobra.Command {
	var keep bool
	var name string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the embedded demo pod and walk through every layer, then remove it",
		Long: `demo runs an embedded pod that shows the whole chain in a few seconds:

  - an init container and two app containers sharing an emptyDir volume;
  - a simulated device plugin (example.com/gpu sets NVIDIA_VISIBLE_DEVICES=0)
    overridden by the container's own env (seed 002), with the policy's warning;
  - CA injection proven by TLS: the demo makes a throwaway CA and a server
    certificate, adds the CA to the pod's bundle (as run --ca-file does) and
    mounts the certificate into the server; the client trusts the server only
    through the injected bundle;
  - two extra demo rules, one per injection point after the kubelet: an env at
    the runtime point (containerd NRI style) and a file at the hook point (an
    OCI createContainer hook);

then prints the stage table, the TLS request, verify's result and which layer
shows each injected item, and removes the pod, printing the teardown stages.
It needs the image podlab-demo:latest (scripts/demo-image.sh; make demo builds
it). Exit status 0 when every step succeeds, including verify and the TLS request.`,
		Example: `  sudo podlab demo
  sudo podlab demo --keep      # leave the pod running; the demo prints how to inspect and remove it`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(g, os.Stdout, name, keep, timeout)
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the pod (and its certificates) instead of removing it")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the client's TLS request")
	// --name runs the demo pod under another name (scripts/gen-docs.sh does,
	// so as not to collide with a user's demo pod: netns names are global).
	cmd.Flags().StringVar(&name, "name", "", "name of the demo pod (default podlab-demo)")
	cmd.Flags().MarkHidden("name")
	return cmd
}

// section prints a numbered heading.
func section(w io.Writer, n int, title string) {
	head := fmt.Sprintf("── %d. %s ", n, title)
	pad := 78 - len([]rune(head))
	if pad < 3 {
		pad = 3
	}
	fmt.Fprintf(w, "\n%s%s\n", head, strings.Repeat("─", pad))
}

func runDemo(g *globalFlags, w io.Writer, name string, keep bool, timeout time.Duration) (retErr error) {
	began := time.Now()
	rec := trace.New()
	end := rec.Start("parse")
	mf, err := manifest.Parse(demoPod)
	end(err)
	if err != nil {
		return fmt.Errorf("embedded demo pod: %w", err)
	}
	if name != "" {
		mf.Pod.Name = name
	}
	rt, err := g.runtime()
	if err != nil {
		return err
	}
	if _, err := rt.Images.Get(demoImage); err != nil {
		return fmt.Errorf("%w\nthe demo needs image %s: build it with sudo scripts/demo-image.sh (make demo does)", err, demoImage)
	}

	// Throwaway PKI and the demo rules' host file, in a private directory.
	dir, err := os.MkdirTemp("", "podlab-demo-")
	if err != nil {
		return err
	}
	removeDir := true
	defer func() {
		if removeDir {
			os.RemoveAll(dir)
		}
	}()
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	caFile, err := writeDemoPKI(dir, demoServerName)
	if err != nil {
		return fmt.Errorf("demo certificates: %w", err)
	}
	hookFile := filepath.Join(dir, "hook.txt")
	if err := os.WriteFile(hookFile, []byte("mounted by the createContainer hook\n"), 0o644); err != nil {
		return err
	}
	pki := false
	for i := range mf.Pod.Spec.Volumes {
		if v := &mf.Pod.Spec.Volumes[i]; v.Name == demoPKIVolume && v.HostPath != nil {
			v.HostPath.Path, pki = filepath.Join(dir, "pki"), true
		}
	}
	if !pki {
		return fmt.Errorf("embedded demo pod: no hostPath volume %q", demoPKIVolume)
	}

	// The platform: the configured rules, the demo CA in the pod's bundle
	// (as run --ca-file does), and one demo rule per later injection point.
	inj := &rt.Config.Injection
	inj.CA.ExtraFiles = append(inj.CA.ExtraFiles, caFile)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": mf.Pod.Labels["app"]}}
	inj.Rules = append(inj.Rules,
		inject.Rule{Name: "demo-runtime", Point: inject.PointRuntime, PodSelector: sel,
			Env: []inject.EnvVar{{Name: "DEMO_INJECTED_BY", Value: "runtime"}}},
		inject.Rule{Name: "demo-hook", Point: inject.PointHook, PodSelector: sel,
			Mounts: []inject.Mount{{HostPath: hookFile, ContainerPath: demoHookPath, ReadOnly: true}}},
	)
	if err := inj.Validate(); err != nil {
		return fmt.Errorf("demo injection rules: %w", err)
	}
	rules := inspect.Rules{Injection: rt.Config.Injection, DevicePlugins: rt.Config.DevicePlugins}

	fmt.Fprintf(w, "podlab demo: one pod, built the way kubelet → CRI → containerd → runc builds it\n")
	section(w, 1, "The pod")
	fmt.Fprintf(w, `%s/%s, image %s (busybox + tlsprobe):
  init     writes /shared/init.txt, runs to completion before the app containers
  server   HTTPS on :8443, certificate for %s (throwaway CA)
  client   limits example.com/gpu: 1, env NVIDIA_VISIBLE_DEVICES=all; calls the
           server at https://localhost:8443/ (one network namespace per pod)
  shared   an emptyDir volume mounted by all three
Platform: env policy %q; rule ca-bundle mounts the pod's CA bundle (host
bundle + the demo CA) and sets SSL_CERT_FILE & co.; demo rules add an env at
the runtime point (demo-runtime) and a file at the hook point (demo-hook).
`, mf.Pod.Namespace, mf.Pod.Name, demoImage, demoServerName, rt.Config.EnvPolicy)

	k := &kubelet.Kubelet{RT: rt, Config: rt.Config, HostIP: runtime.HostIP}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	section(w, 2, "Create: RunPodSandbox (netns → CNI → cgroup → pause) → init → containers")
	id, events, err := k.RunPod(trace.WithRecorder(ctx, rec), mf)
	key := mf.Pod.Namespace + "/" + mf.Pod.Name
	if err != nil {
		trace.WriteTable(w, rec.Spans())
		if errors.Is(err, errdefs.ErrAlreadyExists) {
			return fmt.Errorf("%w: remove the old demo pod first: sudo podlab rm %s", err, mf.Pod.Name)
		}
		if id == "" {
			return err
		}
		// A container failed: the pod is kept for inspection, unless we remove it.
		fmt.Fprintf(w, "\n%v\n", err)
		retErr = err
	} else {
		trace.WriteTable(w, rec.Spans())
		st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
		if err != nil {
			return err
		}
		var info struct {
			State    string   `json:"state"`
			IPs      []string `json:"ips"`
			Gateway  string   `json:"gateway"`
			PausePID int      `json:"pausePid"`
			NetNS    string   `json:"netns"`
		}
		if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
			return fmt.Errorf("pod sandbox %s: its verbose status: %w", id, err)
		}
		fmt.Fprintf(w, "\npod %s is %s: ip %s, gateway %s, pause pid %d,\nnetns %s\n",
			key, info.State, firstOr(info.IPs, "-"), info.Gateway, info.PausePID, info.NetNS)
	}
	defer func() {
		if keep {
			if err := writeDemoConfig(rt, dir); err != nil {
				retErr = errors.Join(retErr, err)
				return
			}
			removeDir = false
			cfg := filepath.Join(dir, "config.yaml")
			fmt.Fprintf(w, "\nKept. The demo's rules and CA are in %s:\n", cfg)
			fmt.Fprintf(w, "  sudo podlab --config %s inspect %s -c %s\n", cfg, mf.Pod.Name, demoClient)
			fmt.Fprintf(w, "  sudo podlab --config %s verify %s\n", cfg, mf.Pod.Name)
			fmt.Fprintf(w, "  sudo podlab rm %s && sudo rm -rf %s\n", mf.Pod.Name, dir)
			return
		}
		section(w, 7, "Teardown: the stages undone, in reverse")
		teardown := trace.New()
		grace, err := podGrace(context.Background(), k, id, -1)
		if err == nil {
			err = k.RemovePod(trace.WithRecorder(context.Background(), teardown), id, grace)
		}
		if err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("removing the demo pod: %w (retry: sudo podlab rm -f %s)", err, mf.Pod.Name))
			return
		}
		trace.WriteTable(w, teardown.Spans())
		if retErr == nil {
			fmt.Fprintf(w, "\ndemo OK in %.1fs: override warned, TLS through the injected CA, verified, removed.\n", time.Since(began).Seconds())
		}
	}()
	if retErr != nil {
		return retErr
	}

	section(w, 3, "Env override: device plugin vs the container's env (seed 002)")
	overrides := 0
	for _, e := range events {
		if e.Type == "Warning" {
			fmt.Fprintf(w, "Warning: %s: %s\n", e.Object, e.Message)
			overrides++
		}
	}
	if overrides == 0 {
		fmt.Fprintln(w, "(no warning: the env policy reported no override)")
	}
	if rt.Config.EnvPolicy == env.PolicyKubelet {
		fmt.Fprintln(w, `The kubelet appends the device plugin's envs, then the container's, and the
runtime keeps the last value: the user's "all" silently replaces the plugin's
"0". podlab reports it; envPolicy platform-wins or reject would prevent it.`)
	} else {
		fmt.Fprintf(w, "Under envPolicy %q the device plugin's value is protected; the kubelet\nitself would have let the container's \"all\" replace it silently.\n", rt.Config.EnvPolicy)
	}

	section(w, 4, "CA injection, proven by TLS inside the pod (client's log)")
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: id}})
	if err != nil {
		return err
	}
	client, err := pickContainer(key, cs.Containers, demoClient)
	if err != nil {
		return err
	}
	out, err := waitForLog(ctx, rt, client, timeout)
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		fmt.Fprintln(w, "  "+l)
	}
	switch {
	case err != nil:
		return err
	case strings.Contains(out, demoTLSOK):
		fmt.Fprintf(w, "The client trusts the demo CA only through the injected bundle,\n%s (host bundle + demo CA, read-only).\n", firstOr(inj.WithDefaults().CA.Paths, "?"))
	default:
		return errors.New("the TLS request inside the pod failed (see the client's log above); does a CA rule (ca: true) select this pod? see podlab config")
	}

	section(w, 5, "verify: does each live process have what the rules promise?")
	v, err := inspect.VerifyPod(rt, id, rules)
	if err != nil {
		return err
	}
	writeDemoVerify(w, v)
	if !v.OK {
		return fmt.Errorf("verify %s: %d of %d checks failed", v.Pod, len(v.Failures()), len(v.Checks))
	}

	section(w, 6, "Which layer shows each item injected into the client")
	r, err := inspect.InspectContainer(rt, client.Id, "all", false, rules)
	if err != nil {
		return err
	}
	writeDemoVisibility(w, r)
	return nil
}

// waitForLog follows the client's log until it reports its TLS request, the
// container exits, or timeout passes; it returns what the log held.
func waitForLog(ctx context.Context, rt *runtime.Runtime, c *runtimeapi.Container, timeout time.Duration) (string, error) {
	st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
	if err != nil {
		return "", err
	}
	name := c.Metadata.Name
	deadline := time.Now().Add(timeout)
	var buf bytes.Buffer
	var why error
	done := func() bool {
		s := buf.String()
		if strings.Contains(s, demoTLSOK) || strings.Contains(s, demoTLSFailed) {
			return true
		}
		cur, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
		switch {
		case err != nil:
			why = err
		case cur.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING:
			why = fmt.Errorf("container %s is %s before its TLS request finished", name, containerStates[cur.Status.State])
		case ctx.Err() != nil:
			why = ctx.Err()
		case time.Now().After(deadline):
			why = fmt.Errorf("no TLS result in the log of container %s after %s", name, timeout)
		default:
			return false
		}
		return true
	}
	if err := runtime.CopyLogs(st.Status.LogPath, &buf, &buf, true, done); err != nil {
		return buf.String(), fmt.Errorf("reading the log of container %s: %w", name, err)
	}
	return buf.String(), why
}

// writeDemoVerify prints verify's checks summed up per container, the
// recorded overrides, and every failure in full.
func writeDemoVerify(w io.Writer, v *inspect.Verification) {
	type group struct {
		name                         string
		checks, failed, envs, mounts int
		running                      bool
		skipped, other               []string
	}
	var groups []*group
	byName := map[string]*group{}
	for _, c := range v.Checks {
		gr := byName[c.Container]
		if gr == nil {
			gr = &group{name: c.Container}
			byName[c.Container] = gr
			groups = append(groups, gr)
		}
		gr.checks++
		if !c.OK {
			gr.failed++
		}
		switch {
		case c.Item == "running":
			gr.running = true
		case strings.HasPrefix(c.Item, "env "):
			gr.envs++
		case strings.HasPrefix(c.Item, "mount "):
			gr.mounts++
		case strings.HasPrefix(c.Item, "excluded by rule "):
			gr.skipped = append(gr.skipped, strings.TrimPrefix(c.Item, "excluded by rule "))
		default:
			gr.other = append(gr.other, c.Item)
		}
	}
	tw := newTab2(w)
	fmt.Fprintln(tw, "CONTAINER\tCHECKS\tRESULT\tWHAT")
	for _, gr := range groups {
		res := "ok"
		if gr.failed > 0 {
			res = fmt.Sprintf("%d FAILED", gr.failed)
		}
		var what []string
		if gr.running {
			what = append(what, "running")
		}
		if gr.envs+gr.mounts > 0 {
			what = append(what, fmt.Sprintf("%d env, %d mounts in the live process", gr.envs, gr.mounts))
		}
		if len(gr.skipped) > 0 {
			what = append(what, "nothing from rules "+strings.Join(gr.skipped, ", "))
		}
		what = append(what, gr.other...)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", gr.name, gr.checks, res, strings.Join(what, "; "))
	}
	tw.Flush()
	for _, o := range v.Overrides {
		name, _, _ := strings.Cut(o.Message, ":")
		fmt.Fprintf(w, "recorded override: %s %s (section 3)\n", o.Container, name)
	}
	fails := v.Failures()
	if len(fails) == 0 {
		fmt.Fprintf(w, "verify %s: all %d checks passed\n", v.Pod, len(v.Checks))
		return
	}
	fmt.Fprintf(w, "verify %s: %d of %d checks failed:\n", v.Pod, len(fails), len(v.Checks))
	for _, c := range fails {
		fmt.Fprintf(w, "  - %s\n", c.String())
	}
}

func newTab2(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// writeDemoVisibility prints inspect's visibility table, narrowed to fit a
// terminal: item, its rule or device plugin, its injection point, and a
// mark per layer.
func writeDemoVisibility(w io.Writer, r *inspect.Report) {
	tw := newTab2(w)
	fmt.Fprintln(tw, "ITEM\tFROM\tPOINT"+inspect.LayerColumns())
	var notes []string
	for _, it := range r.Injected {
		fmt.Fprintf(tw, "%s\t%s\t%s%s\n", it.Label(), it.Origin, it.Point, it.Marks())
		if it.Note != "" {
			notes = append(notes, it.Label()+": "+it.Note)
		}
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprintln(w, "note: "+n)
	}
	fmt.Fprintln(w, `kubelet point: RunContainerOptions onward, so crictl inspect would show it;
runtime point: config.json onward (containerd NRI style: the kubelet never
sees it); hook point: the live process only (as docker inspect misses the
mounts dockershim added). Every layer in full: podlab demo --keep, then the
podlab inspect command it prints.`)
}

// writeDemoPKI writes a throwaway CA and a server certificate for name,
// signed by it: dir/ca.pem, and dir/pki/server.pem and server.key for the
// server's hostPath volume. It returns the CA file.
func writeDemoPKI(dir, name string) (string, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "podlab demo CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", err
	}
	pkiDir := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pkiDir, 0o755); err != nil {
		return "", err
	}
	files := []struct {
		path, typ string
		der       []byte
		mode      os.FileMode
	}{
		{filepath.Join(dir, "ca.pem"), "CERTIFICATE", caDER, 0o644},
		{filepath.Join(pkiDir, "server.pem"), "CERTIFICATE", der, 0o644},
		{filepath.Join(pkiDir, "server.key"), "EC PRIVATE KEY", keyDER, 0o600},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), f.mode); err != nil {
			return "", err
		}
	}
	return files[0].path, nil
}

// writeDemoConfig writes the demo's effective configuration (its CA and
// rules included) to dir/config.yaml, for inspect and verify of a kept pod.
func writeDemoConfig(rt *runtime.Runtime, dir string) error {
	f, err := os.Create(filepath.Join(dir, "config.yaml"))
	if err != nil {
		return err
	}
	fmt.Fprintln(f, "# podlab demo's configuration: the effective one plus the demo CA and rules.")
	if err := printObject(f, "yaml", rt.Config); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}
