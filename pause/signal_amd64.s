#include "textflag.h"

// Signal handlers (the C ABI: the signal number in DI). They return through
// restore, the sa_restorer the kernel requires on amd64.

// onShutdown: what pause.c does on SIGINT and SIGTERM.
TEXT ·onShutdown(SB),NOSPLIT|NOFRAME,$0-0
	CMPQ	DI, $2	// SIGINT
	JNE	term
	MOVQ	·msgINT+0(SB), SI
	MOVQ	·msgINT+8(SB), DX
	JMP	write
term:
	MOVQ	·msgTERM+0(SB), SI
	MOVQ	·msgTERM+8(SB), DX
write:
	MOVQ	$2, DI	// stderr
	MOVQ	$1, AX	// write
	SYSCALL
	MOVQ	$0, DI
	MOVQ	$231, AX	// exit_group
	SYSCALL
	INT	$3

// onChild reaps every exited child: waitpid(-1, NULL, WNOHANG) until none.
TEXT ·onChild(SB),NOSPLIT|NOFRAME,$0-0
again:
	MOVQ	$-1, DI
	MOVQ	$0, SI
	MOVQ	$1, DX	// WNOHANG
	MOVQ	$0, R10
	MOVQ	$61, AX	// wait4
	SYSCALL
	CMPQ	AX, $0
	JGT	again
	RET

// onSettle drops the read-only segments again (see release).
TEXT ·onSettle(SB),NOSPLIT|NOFRAME,$0-0
	LEAQ	·readOnly(SB), BX
	MOVQ	$4, R12
loop:
	MOVQ	0(BX), DI
	MOVQ	8(BX), SI
	CMPQ	SI, $0
	JEQ	next
	MOVQ	$4, DX	// MADV_DONTNEED
	MOVQ	$28, AX	// madvise
	SYSCALL
next:
	ADDQ	$16, BX
	DECQ	R12
	JNZ	loop
	RET

TEXT ·restore(SB),NOSPLIT|NOFRAME,$0-0
	MOVQ	$15, AX	// rt_sigreturn
	SYSCALL
	INT	$3

// func handlerPCs() (shutdown, child, settle, restorer uintptr)
TEXT ·handlerPCs(SB),NOSPLIT,$0-32
	LEAQ	·onShutdown(SB), AX
	MOVQ	AX, shutdown+0(FP)
	LEAQ	·onChild(SB), AX
	MOVQ	AX, child+8(FP)
	LEAQ	·onSettle(SB), AX
	MOVQ	AX, settle+16(FP)
	LEAQ	·restore(SB), AX
	MOVQ	AX, restorer+24(FP)
	RET
