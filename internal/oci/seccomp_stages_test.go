//go:build cgo && seccomp

package oci

import (
	"os"
	"testing"

	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
)

// BenchmarkSeccompStages splits what libcontainer's InitSeccomp does with
// moby's default profile into its stages, in this (warm) process:
// resolving the profile for the capabilities and converting it (both in
// podlab's runtime and shim, before the init), then, in the init,
// building libseccomp's filter (a rule per syscall for x86-64, x86 and
// x32) and exporting it as BPF. runc's ENOSYS patch and the kernel load
// are in BenchmarkSeccompLoad's precompiled figure (late compile + load).
func BenchmarkSeccompStages(b *testing.B) {
	s := specconv.Example()
	s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: criDefaultCaps, Effective: criDefaultCaps, Permitted: criDefaultCaps}
	b.Run("resolve", func(b *testing.B) {
		for b.Loop() {
			if _, err := DefaultSeccomp(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	ls, err := DefaultSeccomp(s)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("specconv", func(b *testing.B) {
		for b.Loop() {
			if _, err := specconv.SetupSeccomp(ls); err != nil {
				b.Fatal(err)
			}
		}
	})
	m, err := specconv.SetupSeccomp(ls)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("rules", func(b *testing.B) {
		for b.Loop() {
			buildFilter(b, m).Release()
		}
	})
	b.Run("export", func(b *testing.B) {
		devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer devNull.Close()
		for b.Loop() {
			b.StopTimer()
			f := buildFilter(b, m)
			b.StartTimer()
			if err := f.ExportBPF(devNull); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			f.Release()
			b.StartTimer()
		}
	})
}

// buildFilter adds m's rules to a libseccomp filter as libcontainer's
// InitSeccomp does (its matchCall), without loading it.
func buildFilter(b *testing.B, m *configs.Seccomp) *libseccomp.ScmpFilter {
	action := func(a configs.Action, errno *uint) libseccomp.ScmpAction {
		switch a {
		case configs.Allow:
			return libseccomp.ActAllow
		case configs.Errno:
			if errno != nil {
				return libseccomp.ActErrno.SetReturnCode(int16(*errno))
			}
			return libseccomp.ActErrno.SetReturnCode(1)
		}
		b.Fatalf("action %v not in moby's profile", a)
		return 0
	}
	ops := map[configs.Operator]libseccomp.ScmpCompareOp{
		configs.EqualTo: libseccomp.CompareEqual, configs.NotEqualTo: libseccomp.CompareNotEqual,
		configs.GreaterThan: libseccomp.CompareGreater, configs.GreaterThanOrEqualTo: libseccomp.CompareGreaterEqual,
		configs.LessThan: libseccomp.CompareLess, configs.LessThanOrEqualTo: libseccomp.CompareLessOrEqual,
		configs.MaskEqualTo: libseccomp.CompareMaskedEqual,
	}
	def := action(m.DefaultAction, m.DefaultErrnoRet)
	f, err := libseccomp.NewFilter(def)
	if err != nil {
		b.Fatal(err)
	}
	for _, a := range m.Architectures {
		arch, err := libseccomp.GetArchFromString(a)
		if err == nil {
			err = f.AddArch(arch)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := f.SetOptimize(2); err != nil {
		b.Fatal(err)
	}
	for _, call := range m.Syscalls {
		act := action(call.Action, call.ErrnoRet)
		nr, err := libseccomp.GetSyscallFromName(call.Name)
		if act == def || err != nil {
			continue
		}
		var conds []libseccomp.ScmpCondition
		perArg := map[uint]int{}
		for _, a := range call.Args {
			c, err := libseccomp.MakeCondition(a.Index, ops[a.Op], a.Value, a.ValueTwo)
			if err != nil {
				b.Fatal(err)
			}
			conds = append(conds, c)
			perArg[a.Index]++
		}
		switch {
		case len(conds) == 0:
			err = f.AddRule(nr, act)
		case len(perArg) < len(conds): // two conditions on one argument: a rule each
			for _, c := range conds {
				if err = f.AddRuleConditional(nr, act, []libseccomp.ScmpCondition{c}); err != nil {
					break
				}
			}
		default:
			err = f.AddRuleConditional(nr, act, conds)
		}
		if err != nil {
			b.Fatalf("%s: %v", call.Name, err)
		}
	}
	return f
}
