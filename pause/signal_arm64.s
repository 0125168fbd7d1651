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

TEXT ·restore(SB),NOSPLIT|NOFRAME,$0-0
	MOVD	$139, R8	// rt_sigreturn
	SVC
	BRK

// func handlerPCs() (shutdown, child, restorer uintptr)
TEXT ·handlerPCs(SB),NOSPLIT,$0-24
	MOVD	$·onShutdown(SB), R0
	MOVD	R0, shutdown+0(FP)
	MOVD	$·onChild(SB), R0
	MOVD	R0, child+8(FP)
	MOVD	$·restore(SB), R0
	MOVD	R0, restorer+16(FP)
	RET
