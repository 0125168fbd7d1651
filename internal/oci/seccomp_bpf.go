package oci

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// A classic BPF interpreter for seccomp programs: the kernel's semantics
// (linux/kernel/seccomp.c, net/core/filter.c) for the instructions
// seccomp_check_filter admits. It lets podlab prove, without loading
// anything, that a stack of filters decides every system call as one
// reference filter does.

// seccompData is struct seccomp_data in the host's byte order: nr, arch,
// instruction_pointer, args[6].
type seccompData [64]byte

func newSeccompData(nr, arch uint32, args [6]uint64) seccompData {
	var d seccompData
	binary.NativeEndian.PutUint32(d[0:], nr)
	binary.NativeEndian.PutUint32(d[4:], arch)
	for i, a := range args {
		binary.NativeEndian.PutUint64(d[16+8*i:], a)
	}
	return d
}

var errBadInsn = errors.New("instruction outside seccomp's classic BPF")

// runBPF runs prog on d and returns the filter's verdict. readArgs
// reports whether the run loaded any word of args: a run that did not
// takes the same path for every argument value.
func runBPF(prog []unix.SockFilter, d *seccompData) (ret uint32, readArgs bool, err error) {
	var a, x uint32
	var mem [16]uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		k := in.K
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if k%4 != 0 || k >= uint32(len(d)) {
				return 0, readArgs, fmt.Errorf("load at offset %d", k)
			}
			readArgs = readArgs || k >= 16
			a = binary.NativeEndian.Uint32(d[k:])
		case unix.BPF_LD | unix.BPF_W | unix.BPF_LEN:
			a = uint32(len(d))
		case unix.BPF_LDX | unix.BPF_W | unix.BPF_LEN:
			x = uint32(len(d))
		case unix.BPF_LD | unix.BPF_IMM:
			a = k
		case unix.BPF_LDX | unix.BPF_IMM:
			x = k
		case unix.BPF_LD | unix.BPF_MEM:
			if k >= 16 {
				return 0, readArgs, errBadInsn
			}
			a = mem[k]
		case unix.BPF_LDX | unix.BPF_MEM:
			if k >= 16 {
				return 0, readArgs, errBadInsn
			}
			x = mem[k]
		case unix.BPF_ST:
			if k >= 16 {
				return 0, readArgs, errBadInsn
			}
			mem[k] = a
		case unix.BPF_STX:
			if k >= 16 {
				return 0, readArgs, errBadInsn
			}
			mem[k] = x
		case unix.BPF_MISC | unix.BPF_TAX:
			x = a
		case unix.BPF_MISC | unix.BPF_TXA:
			a = x
		case unix.BPF_RET | unix.BPF_K:
			return k, readArgs, nil
		case unix.BPF_RET | unix.BPF_A:
			return a, readArgs, nil
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(k)
		default:
			switch in.Code & 0x07 {
			case unix.BPF_ALU:
				src := k
				if in.Code&unix.BPF_X != 0 {
					src = x
				}
				switch in.Code & 0xf0 {
				case unix.BPF_ADD:
					a += src
				case unix.BPF_SUB:
					a -= src
				case unix.BPF_MUL:
					a *= src
				case unix.BPF_DIV:
					if src == 0 {
						return 0, readArgs, nil // the kernel's classic BPF returns 0
					}
					a /= src
				case unix.BPF_MOD:
					if src == 0 {
						return 0, readArgs, nil
					}
					a %= src
				case unix.BPF_AND:
					a &= src
				case unix.BPF_OR:
					a |= src
				case unix.BPF_XOR:
					a ^= src
				case unix.BPF_LSH:
					a <<= src & 31
				case unix.BPF_RSH:
					a >>= src & 31
				case unix.BPF_NEG:
					a = -a
				default:
					return 0, readArgs, errBadInsn
				}
			case unix.BPF_JMP:
				src := k
				if in.Code&unix.BPF_X != 0 {
					src = x
				}
				var cond bool
				switch in.Code & 0xf0 {
				case unix.BPF_JEQ:
					cond = a == src
				case unix.BPF_JGT:
					cond = a > src
				case unix.BPF_JGE:
					cond = a >= src
				case unix.BPF_JSET:
					cond = a&src != 0
				default:
					return 0, readArgs, errBadInsn
				}
				if cond {
					pc += int(in.Jt)
				} else {
					pc += int(in.Jf)
				}
			default:
				return 0, readArgs, fmt.Errorf("%w: code %#x", errBadInsn, in.Code)
			}
		}
	}
	return 0, readArgs, errors.New("program ran off its end")
}

// actionOnly is the kernel's ACTION_ONLY: the action without its data,
// ordered so that the lower value takes precedence.
func actionOnly(ret uint32) int32 { return int32(ret & unix.SECCOMP_RET_ACTION_FULL) }

// runStack is the kernel's verdict for a stack of filters, newest first
// (seccomp_run_filters): the action of highest precedence; of equal ones,
// the newest filter's.
func runStack(stack [][]unix.SockFilter, d *seccompData) (ret uint32, readArgs bool, err error) {
	ret = unix.SECCOMP_RET_ALLOW
	for _, prog := range stack {
		cur, read, err := runBPF(prog, d)
		if err != nil {
			return 0, readArgs, err
		}
		readArgs = readArgs || read
		if actionOnly(cur) < actionOnly(ret) {
			ret = cur
		}
	}
	return ret, readArgs, nil
}

// sameVerdicts checks that the stack decides as ref for every system call
// number below 1024 (and its x32 twin, bit 30 set), and the ends of the
// range, of every architecture in arches plus one the filters do not
// know; where a run read arguments, for each argument set in turn to
// every constant the programs compare with, and its neighbours, in either
// half of the 64-bit word.
func sameVerdicts(ref []unix.SockFilter, stack [][]unix.SockFilter, arches []uint32) error {
	arches = append(slices.Clone(arches), 0xdeadbeef)
	consts := argConstants(append([][]unix.SockFilter{ref}, stack...))
	check := func(nr, arch uint32, args [6]uint64) (bool, error) {
		d := newSeccompData(nr, arch, args)
		want, readRef, err := runBPF(ref, &d)
		if err != nil {
			return false, fmt.Errorf("reference filter: %w", err)
		}
		got, readStack, err := runStack(stack, &d)
		if err != nil {
			return false, fmt.Errorf("filter stack: %w", err)
		}
		if got != want {
			return false, fmt.Errorf("syscall %d arch %#x args %#x: stack returns %#x, reference %#x", nr, arch, args, got, want)
		}
		return readRef || readStack, nil
	}
	var nrs []uint32
	for _, base := range []uint32{0, 0x40000000} {
		for nr := base; nr < base+1024; nr++ {
			nrs = append(nrs, nr)
		}
	}
	// and the ends of the range (-1 is what a tracer's skipped call shows)
	nrs = append(nrs, 0x3fffffff, 0x7fffffff, 0x80000000, 0xbfffffff, 0xffffffff)
	for _, arch := range arches {
		for _, nr := range nrs {
			readArgs, err := check(nr, arch, [6]uint64{})
			if err != nil {
				return err
			}
			if readArgs {
				for i := range 6 {
					for _, c := range consts {
						var args [6]uint64
						args[i] = c
						if _, err := check(nr, arch, args); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	return nil
}

// argConstants are the values an argument is tried with: each constant
// a program compares an argument word with (or masks it with), its
// neighbours, as the low or the high word, and all bits set. A scan in
// program order tells an argument word in A from the syscall number or
// the architecture, as libseccomp and runc emit them: a load, an
// optional mask, the comparisons.
func argConstants(progs [][]unix.SockFilter) []uint64 {
	seen := map[uint64]bool{0: true, ^uint64(0): true}
	for _, prog := range progs {
		argInA := false
		for _, in := range prog {
			switch {
			case in.Code == unix.BPF_LD|unix.BPF_W|unix.BPF_ABS:
				argInA = in.K >= 16
				continue
			case in.Code&0x07 == unix.BPF_LD || in.Code == unix.BPF_MISC|unix.BPF_TXA:
				argInA = false
				continue
			case !argInA || (in.Code&0x07 != unix.BPF_JMP && in.Code&0x07 != unix.BPF_ALU):
				continue
			}
			for _, k := range []uint32{in.K, in.K - 1, in.K + 1, ^in.K} {
				seen[uint64(k)] = true
				seen[uint64(k)<<32] = true
				seen[uint64(k)<<32|uint64(k)] = true
			}
		}
	}
	out := make([]uint64, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
