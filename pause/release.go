package main

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// release unmaps the pages of the pause binary that start-up faulted in:
// the runtime's start reads all of its read-only data (the function tables
// it verifies) and code that a sleeping pause never runs again. They stay
// in the page cache, shared by every pod's pause; dropping this process's
// mappings of them (MADV_DONTNEED on the read-only, file-backed segments,
// which refault from the cache if touched) takes them out of its resident
// set, as they were never part of its real cost. Writable segments are
// left alone: for them DONTNEED would discard data. Where signals are
// caught in assembly, onSettle drops the same spans again once the runtime
// is idle (see armSettle).
func release() {
	auxv, err := unix.Auxv()
	if err != nil {
		return // not an error: pause works the same, only bigger
	}
	var phdr, phnum uintptr
	for _, kv := range auxv {
		switch kv[0] {
		case atPHDR:
			phdr = kv[1]
		case atPHNUM:
			phnum = kv[1]
		}
	}
	if phdr == 0 || phnum == 0 {
		return
	}
	page := uintptr(syscall.Getpagesize())
	n := 0
	// The headers are in the process image, outside the Go heap.
	progs := unsafe.Slice(*(**elfProg)(unsafe.Pointer(&phdr)), phnum)
	for _, p := range progs {
		if p.typ != ptLoad || p.flags&pfW != 0 {
			continue
		}
		start := uintptr(p.vaddr) &^ (page - 1)
		end := (uintptr(p.vaddr+p.filesz) + page - 1) &^ (page - 1)
		syscall.Syscall(syscall.SYS_MADVISE, start, end-start, syscall.MADV_DONTNEED)
		if n < len(readOnly) {
			readOnly[n] = span{start, end - start}
			n++
		}
	}
}

// readOnly is what release dropped, for onSettle: at most four spans, as
// the assembly walks a fixed array (Go's linker writes two).
var readOnly [4]span

type span struct{ start, length uintptr }

// The ELF auxiliary vector and program header (Elf64_Phdr) entries used.
// Not debug/elf's: importing it would run its dependencies' package init
// (compress/flate builds tables) in every pod's pause.
const (
	atPHDR  = 3
	atPHNUM = 5
	ptLoad  = 1
	pfW     = 0x2
)

type elfProg struct {
	typ, flags uint32
	_          uint64 // p_offset
	vaddr      uint64
	_          uint64 // p_paddr
	filesz     uint64
	_, _       uint64 // p_memsz, p_align
}
