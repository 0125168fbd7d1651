// Command nriplugin is the NRI plugin podlab's e2e tests run, built on
// containerd/nri's stub as NRI's own example plugins are: it adds env vars
// and bind mounts to the containers of pods that carry a label, or fails
// their creation. It prints "synchronized" once the runtime synchronized
// it, so a test knows it takes part in the next event, then a line for
// each pod event of a pod it selects (the pod's name and resources as NRI
// gave them), and can fail a pod's resource update.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type plugin struct {
	env        []*api.KeyValue
	mounts     []*api.Mount
	selector   map[string]string
	fail       bool
	failUpdate bool
}

func (p *plugin) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	fmt.Println("synchronized")
	return nil, nil
}

func (p *plugin) selects(pod *api.PodSandbox) bool {
	for k, v := range p.selector {
		if pod.Labels[k] != v {
			return false
		}
	}
	return true
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if !p.selects(pod) {
		return nil, nil, nil
	}
	if p.fail {
		return nil, nil, errors.New("refused by the e2e plugin (-fail)")
	}
	adjust := &api.ContainerAdjustment{}
	for _, kv := range p.env {
		adjust.AddEnv(kv.Key, kv.Value)
	}
	for _, m := range p.mounts {
		adjust.AddMount(m)
	}
	return adjust, nil, nil
}

// resources is "memory=LIMIT cpu-shares=SHARES" of r, "-" for each unset.
func resources(r *api.LinuxResources) string {
	mem, shares := "-", "-"
	if v := r.GetMemory().GetLimit(); v != nil {
		mem = fmt.Sprint(v.GetValue())
	}
	if v := r.GetCpu().GetShares(); v != nil {
		shares = fmt.Sprint(v.GetValue())
	}
	return "memory=" + mem + " cpu-shares=" + shares
}

func (p *plugin) event(name string, pod *api.PodSandbox, overhead, res *api.LinuxResources) {
	if p.selects(pod) {
		fmt.Printf("%s %s resources %s overhead %s\n", name, pod.Name, resources(res), resources(overhead))
	}
}

func (p *plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.event("RunPodSandbox", pod, pod.GetLinux().GetPodOverhead(), pod.GetLinux().GetPodResources())
	return nil
}

func (p *plugin) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, overhead, res *api.LinuxResources) error {
	p.event("UpdatePodSandbox", pod, overhead, res)
	if p.failUpdate && p.selects(pod) {
		return errors.New("refused by the e2e plugin (-fail-update)")
	}
	return nil
}

func (p *plugin) PostUpdatePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.event("PostUpdatePodSandbox", pod, pod.GetLinux().GetPodOverhead(), pod.GetLinux().GetPodResources())
	return nil
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	var env, mounts, selector list
	name := flag.String("name", "e2e", "plugin name")
	idx := flag.String("idx", "50", "plugin index (its order among plugins)")
	socket := flag.String("socket", "", "the runtime's NRI socket")
	fail := flag.Bool("fail", false, "fail the creation of the containers it selects")
	failUpdate := flag.Bool("fail-update", false, "fail the resource updates of the pods it selects")
	flag.Var(&env, "env", "KEY=VALUE to add (repeatable)")
	flag.Var(&mounts, "mount", "HOSTPATH:CONTAINERPATH to bind read-only (repeatable)")
	flag.Var(&selector, "select", "KEY=VALUE a pod's labels must hold (repeatable)")
	flag.Parse()

	p := &plugin{fail: *fail, failUpdate: *failUpdate, selector: map[string]string{}}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		p.env = append(p.env, &api.KeyValue{Key: k, Value: v})
	}
	for _, m := range mounts {
		src, dst, _ := strings.Cut(m, ":")
		p.mounts = append(p.mounts, &api.Mount{Source: src, Destination: dst, Type: "bind", Options: []string{"rbind", "ro"}})
	}
	for _, s := range selector {
		k, v, _ := strings.Cut(s, "=")
		p.selector[k] = v
	}
	s, err := stub.New(p, stub.WithPluginName(*name), stub.WithPluginIdx(*idx), stub.WithSocketPath(*socket))
	if err != nil {
		fmt.Fprintln(os.Stderr, "nriplugin:", err)
		os.Exit(1)
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "nriplugin:", err)
		os.Exit(1)
	}
}
