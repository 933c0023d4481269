/* One x86-64 instruction, as the entry patcher needs to know it: its
 * length, whether it moves with the code (a relative branch, a RIP-relative
 * operand), and whether it can be moved at all.  Decoded by Capstone
 * (decoder.c), loaded only in a process that has an entry to route. */
#ifndef MLK_ROUTE_DECODER_H
#define MLK_ROUTE_DECODER_H

#include <stddef.h>
#include <stdint.h>

enum mlk_insn_kind {
    MLK_INSN_PLAIN,    /* runs the same anywhere, or has a RIP-relative operand (disp_*) */
    MLK_INSN_JMP,      /* jmp to `target` (relative) */
    MLK_INSN_JCC,      /* conditional jump to `target` (relative); `cc` its condition nibble */
    MLK_INSN_CALL,     /* call `target` (relative) */
    MLK_INSN_END,      /* ret, an indirect jmp, int3, ud2, hlt: nothing after it runs */
    MLK_INSN_FIXED,    /* a relative branch with no long form (loop, jrcxz): cannot move */
};

struct mlk_insn {
    uint8_t len;
    uint8_t kind;        /* enum mlk_insn_kind */
    uint8_t cc;          /* MLK_INSN_JCC: 0x0-0xf, as in the 0x70+cc opcode */
    uint8_t disp_offset; /* a RIP-relative operand's 32-bit displacement, or 0 */
    uint8_t padding;     /* a nop of any length, or int3: what aligns functions */
    uint64_t target;     /* a relative branch's destination */
};

/* Loads the decoder (once).  0, or -1 with the reason in `why`. */
int mlk_decoder_open(char *why, size_t why_len);

/* Decodes the instruction at `code` (up to `avail` bytes readable), which
 * runs at address `at`.  0, or -1 when the bytes are no instruction. */
int mlk_decode(const uint8_t *code, size_t avail, uint64_t at, struct mlk_insn *out);

#endif
