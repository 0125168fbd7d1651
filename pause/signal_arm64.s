#include "textflag.h"

// Signal handlers (the C ABI: the signal number in R0). They return through
// LR, which the kernel points at restore, the sa_restorer.

// onShutdown: what pause.c does on SIGINT and SIGTERM.
TEXT ·onShutdown(SB),NOSPLIT|NOFRAME,$0-0
	CMP	$2, R0	// SIGINT
	BNE	term
	MOVD	·msgINT+0(SB), R1
	MOVD	·msgINT+8(SB), R2
	B	write
term:
	MOVD	·msgTERM+0(SB), R1
	MOVD	·msgTERM+8(SB), R2
write:
	MOVD	$2, R0	// stderr
	MOVD	$64, R8	// write
	SVC
	MOVD	$0, R0
	MOVD	$94, R8	// exit_group
	SVC
	BRK

// onChild reaps every exited child: waitpid(-1, NULL, WNOHANG) until none.
TEXT ·onChild(SB),NOSPLIT|NOFRAME,$0-0
again:
	MOVD	$-1, R0
	MOVD	$0, R1
	MOVD	$1, R2	// WNOHANG
	MOVD	$0, R3
	MOVD	$260, R8	// wait4
	SVC
	CMP	$0, R0
	BGT	again
	RET

// onSettle drops the read-only segments again (see release).
TEXT ·onSettle(SB),NOSPLIT|NOFRAME,$0-0
	MOVD	$·readOnly(SB), R9
	MOVD	$4, R10
loop:
	MOVD	0(R9), R0
	MOVD	8(R9), R1
	CBZ	R1, next
	MOVD	$4, R2	// MADV_DONTNEED
	MOVD	$233, R8	// madvise
	SVC
next:
	ADD	$16, R9
	SUB	$1, R10
	CBNZ	R10, loop
	RET

TEXT ·restore(SB),NOSPLIT|NOFRAME,$0-0
	MOVD	$139, R8	// rt_sigreturn
	SVC
	BRK

// func handlerPCs() (shutdown, child, settle, restorer uintptr)
TEXT ·handlerPCs(SB),NOSPLIT,$0-32
	MOVD	$·onShutdown(SB), R0
	MOVD	R0, shutdown+0(FP)
	MOVD	$·onChild(SB), R0
	MOVD	R0, child+8(FP)
	MOVD	$·onSettle(SB), R0
	MOVD	R0, settle+16(FP)
	MOVD	$·restore(SB), R0
	MOVD	R0, restorer+24(FP)
	RET
