package cgroups

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOOMKillOf(t *testing.T) {
	const scope = "/podlab.slice/podlab-podabc.slice/podlab-def.scope"
	summary := "6,1234,5678901,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=podlab-def.scope,mems_allowed=0,oom_memcg=" + scope + ",task_memcg=" + scope + ",task=dd,pid=1579,uid=0\n"
	for _, tc := range []struct {
		name, record, memcg string
		want                bool
	}{
		{"the container's kill", summary, scope, true},
		{"another container's", summary, "/podlab.slice/podlab-podabc.slice/podlab-xyz.scope", false},
		{"an ancestor, as memory.events counts", summary, "/podlab.slice/podlab-podabc.slice", true},
		{"a name that shares a prefix", summary, "/podlab.slice/podlab-podabc.slice/podlab-de", false},
		{"crun's cgroup in the scope (systemd)", strings.Replace(summary, "task_memcg="+scope, "task_memcg="+scope+"/container", 1), scope, true},
		{"the pod's limit, the container's task", "6,1,2,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/podlab.slice/podlab-podabc.slice,task_memcg=" + scope + ",task=sh,pid=7,uid=0\n", scope, true},
		{"the kill line without the cgroup", "3,1235,5678902,-;Memory cgroup out of memory: Killed process 1579 (dd) total-vm:22000kB\n", scope, false},
		{"not a record", "oom-kill:task_memcg=" + scope + ",", scope, false},
	} {
		if got := oomKillOf([]byte(tc.record), tc.memcg); got != tc.want {
			t.Errorf("%s: oomKillOf = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMemcgPath(t *testing.T) {
	for file, want := range map[string]string{
		"/sys/fs/cgroup/podlab.slice/podlab-def.scope/memory.events": "/podlab.slice/podlab-def.scope",
		"/sys/fs/cgroup/memory.events":                               "/",
		"/tmp/x/memory.events":                                       "",
	} {
		if got := memcgPath(file); got != want {
			t.Errorf("memcgPath(%q) = %q, want %q", file, got, want)
		}
	}
}

// The kernel log is read from where it stood when opened: a record the
// test writes to it afterwards (as root; /dev/kmsg takes writes from
// CAP_SYSLOG) is found, one written before is not.
func TestKmsgOOMKillReadsFromOpen(t *testing.T) {
	// testutil.RequireRoot's rule; testutil imports this package.
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("writing to /dev/kmsg needs root, and CI=true: run as root")
		}
		t.Skip("writing to /dev/kmsg needs root (set CI=true to make this a failure)")
	}
	const before, after = "/podlab-kmsg-test-before.scope", "/podlab-kmsg-test-after.scope"
	write := func(memcg string) {
		t.Helper()
		f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString("oom-kill:constraint=CONSTRAINT_MEMCG,task_memcg=" + memcg + ",task=test,pid=1,uid=0\n"); err != nil {
			t.Fatal(err)
		}
	}
	write(before)
	kmsg := openKmsg()
	if kmsg < 0 {
		t.Fatal("cannot open /dev/kmsg as root")
	}
	defer unix.Close(kmsg)
	write(after)
	if kmsgOOMKill(kmsg, before) {
		t.Error("found a record written before the log was opened")
	}
	kmsg2 := openKmsg()
	defer unix.Close(kmsg2)
	write(after)
	if !kmsgOOMKill(kmsg2, after) {
		t.Error("did not find a record written after the log was opened")
	}
}
