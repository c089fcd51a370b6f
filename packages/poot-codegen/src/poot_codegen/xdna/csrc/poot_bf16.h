/* poot_bf16.h: bf16 rounding for poot's XDNA2 matmul kernels (poot_codegen.xdna.matmul).
 *
 * The matmul arithmetic is upstream's aie2p one (mlir-aie aie_kernels/aie2p/mm.cc over
 * aie::mmul<4,8,8,bfloat16,bfloat16>): operands rounded to bf16, each bf16 x bf16 product exact
 * in f32 (8 + 8 significant bits fit in 24), added in order of k into an f32 accumulator. Here it
 * is scalar C, so the host compiler computes exactly what the core does: the rounding is integer
 * work on the bits, the product of two bf16 values held in floats is exact whatever the float
 * unit, and the add is f32 (round to nearest even on the host and in compiler-rt's soft float).
 */
#ifndef POOT_BF16_H
#define POOT_BF16_H

#include <stdint.h>

#include "poot_math.h"

/* x rounded to the nearest bf16, ties to even (as ml_dtypes.bfloat16 and the host's
 * float->bfloat16 conversions), returned as the f32 that holds it exactly. A NaN stays a quiet
 * NaN with its sign (truncated: rounding its payload could carry into the exponent); a finite
 * value past bf16's largest (0x7f7f) rounds to an infinity, which the contract's domain
 * excludes and the kernel's guard counts. */
static inline float poot_bf16f(float x) {
    uint32_t b = poot_f32_bits(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) return poot_f32_from_bits((b | 0x00400000u) & 0xffff0000u);
    b += 0x7fffu + ((b >> 16) & 1u);
    return poot_f32_from_bits(b & 0xffff0000u);
}

#endif /* POOT_BF16_H */
