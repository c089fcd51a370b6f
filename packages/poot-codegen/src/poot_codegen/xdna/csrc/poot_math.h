/* poot_math.h: the software math library of poot's XDNA2 C kernels.
 *
 * The same source compiles with Peano (clang++ -std=c++20 --target=aie2p-none-unknown-elf) and
 * with the host C compiler (C99 or later) for hardware-free tests. The AIE core has no scalar
 * FPU: f32 mul and div are software calls and any f64 code fails to legalize, so everything here
 * is f32 only: every constant carries the f suffix, there is no libm call and no <math.h>, and
 * bit casts go through __builtin_memcpy (gcc and clang both inline it, no header needed).
 *
 * Contracts are stated against the exact function of the f32 input; "the exp bound" below is
 * |y - f(x)| <= 2e-6 + 1e-5 * |f(x)|. Outside a function's stated domain nothing is promised,
 * though NaN inputs return NaN. The tests in packages/poot-codegen/tests/test_poot_math.py
 * measure each contract on the host; the coefficients are weighted-minimax fits made for this
 * file (Lawson iterations over Chebyshev nodes, then rounded to f32).
 */
#ifndef POOT_MATH_H
#define POOT_MATH_H

#include <stdint.h>

#define POOT_FLT_MIN 1.17549435e-38f /* smallest positive normal f32 */
#define POOT_FLT_MAX 3.40282347e+38f
#define POOT_LN2_HI 0.693359375f     /* 9 significant bits: k * LN2_HI is exact for |k| < 2^15 */
#define POOT_LN2_LO -2.12194440e-4f  /* ln 2 - LN2_HI */

/* Bit casts between an f32 and its IEEE-754 pattern. */
static inline uint32_t poot_f32_bits(float x) {
    uint32_t b;
    __builtin_memcpy(&b, &x, sizeof b);
    return b;
}

static inline float poot_f32_from_bits(uint32_t b) {
    float x;
    __builtin_memcpy(&x, &b, sizeof x);
    return x;
}

/* A quiet NaN and +infinity, built from bits (no f64 division tricks). */
static inline float poot_nanf(void) { return poot_f32_from_bits(0x7fc00000u); }
static inline float poot_inff(void) { return poot_f32_from_bits(0x7f800000u); }

/* |x|, -x and copysign by the sign bit: exact for every input, zeros and NaN payloads included. */
static inline float poot_absf(float x) { return poot_f32_from_bits(poot_f32_bits(x) & 0x7fffffffu); }
static inline float poot_negf(float x) { return poot_f32_from_bits(poot_f32_bits(x) ^ 0x80000000u); }
static inline float poot_copysignf(float mag, float sign) {
    return poot_f32_from_bits((poot_f32_bits(mag) & 0x7fffffffu) | (poot_f32_bits(sign) & 0x80000000u));
}

/* The larger (smaller) operand, exactly: one compare and a select. Operands must not be NaN. */
static inline float poot_maxf(float a, float b) { return a > b ? a : b; }
static inline float poot_minf(float a, float b) { return a < b ? a : b; }

/* 1 / x, the IEEE quotient (the core's software division is correctly rounded). */
static inline float poot_recipf(float x) { return 1.0f / x; }

/* 2^k as an f32, exact for -126 <= k <= 127 (a normal number built from its exponent field). */
static inline float poot_pow2i(int32_t k) { return poot_f32_from_bits((uint32_t)(k + 127) << 23); }

/* exp(x).
 * Method: clamp x to [-88, 88]; x = k ln2 + r with k = round(x / ln2), |r| <= ln2/2, r computed
 * Cody-Waite style (LN2_HI exact, then LN2_LO); exp(r) = 1 + r + r^2 P(r), P of degree 4
 * (relative fit error 3.2e-9); the result is scaled by 2^k in two halves so that k = -127
 * (x near -88) never needs a subnormal power of two.
 * A result below the smallest normal (x below about -87.34, -inf included) is flushed to +0:
 * the exact value is then below 1.2e-38, far inside the absolute part of the bound, and a zero
 * (unlike a subnormal) passes every later step's result guard exactly (0 * y, 0 / y, 0 + y).
 * Contract: the exp bound over [-inf, 88]. Arguments beyond 88 saturate to exp(88): finite,
 * never infinity.
 */
static inline float poot_expf(float x) {
    if (x != x) return x;
    x = poot_minf(poot_maxf(x, -88.0f), 88.0f);
    float kf = x * 1.44269504f;
    int32_t k = (int32_t)(kf + (kf >= 0.0f ? 0.5f : -0.5f));
    float fk = (float)k;
    float r = (x - fk * POOT_LN2_HI) - fk * POOT_LN2_LO;
    float p = 0.00138141797f;
    p = 0.00836891867f + r * p;
    p = 0.0416684076f + r * p;
    p = 0.166665196f + r * p;
    p = 0.49999994f + r * p;
    float e = 1.0f + (r + r * r * p);
    int32_t k1 = k / 2;
    float y = e * poot_pow2i(k1) * poot_pow2i(k - k1);
    return y < POOT_FLT_MIN ? 0.0f : y;
}

/* log(x).
 * Method: x = 2^e m with m in [sqrt(1/2), sqrt(2)) read from the bit pattern (subnormals are
 * scaled by 2^24 first); f = (m - 1) / (m + 1), so m - 1 is exact and |f| <= 0.1716;
 * log(m) = 2 atanh(f) = 2f + 2f s Q(s), s = f^2, Q of degree 2 (relative fit error 8e-10);
 * log(x) = e LN2_HI + (log(m) + e LN2_LO), the first product exact.
 * Contract: the exp bound over the positive normal numbers, 1.17549435e-38 to 3.40282347e38.
 * Also log(+0) = -inf, log(+inf) = +inf, negative or NaN -> NaN.
 */
static inline float poot_logf(float x) {
    if (x != x || x < 0.0f) return poot_nanf();
    if (x == 0.0f) return -poot_inff();
    if (x > POOT_FLT_MAX) return x;
    int32_t e = 0;
    if (x < POOT_FLT_MIN) {
        x = x * 16777216.0f; /* 2^24 */
        e = -24;
    }
    uint32_t b = poot_f32_bits(x);
    e += (int32_t)((b >> 23) & 0xffu) - 127;
    float m = poot_f32_from_bits((b & 0x007fffffu) | 0x3f800000u); /* [1, 2) */
    if (m > 1.41421356f) {
        m = m * 0.5f;
        e += 1;
    }
    float f = (m - 1.0f) / (m + 1.0f);
    float s = f * f;
    float q = 0.149355248f;
    q = 0.199887857f + s * q;
    q = 0.33333388f + s * q;
    float f2 = f + f;
    float lm = f2 + f2 * s * q;
    float fe = (float)e;
    return fe * POOT_LN2_HI + (lm + fe * POOT_LN2_LO);
}

/* tanh(x).
 * Method: on a = |x|, then the sign of x copied back, so odd symmetry is exact.
 * a < 0.625: tanh(a) = a + a s P(s), s = a^2, P of degree 4 (relative fit error 4.4e-9), so
 * tiny arguments keep their relative accuracy (tanh(a) = a below 2^-12).
 * 0.625 <= a < 9.1: tanh(a) = 1 - 2 / (exp(2a) + 1), no cancellation since tanh(a) > 0.55.
 * a >= 9.1: exactly 1 (1 - tanh(9.1) is below half an ulp of 1).
 * Contract: the exp bound over every finite input; saturates to exactly +-1; odd exactly.
 */
static inline float poot_tanhf(float x) {
    if (x != x) return x;
    float a = poot_absf(x);
    float t;
    if (a < 0.625f) {
        float s = a * a;
        float p = -0.00570498733f;
        p = 0.0206390880f + s * p;
        p = -0.0537397154f + s * p;
        p = 0.133314416f + s * p;
        p = -0.333332807f + s * p;
        t = a + a * s * p;
    } else if (a < 9.1f) {
        t = 1.0f - 2.0f / (poot_expf(a + a) + 1.0f);
    } else {
        t = 1.0f;
    }
    return poot_copysignf(t, x);
}

/* erf(x).
 * Method: on a = |x|, then the sign of x copied back, so odd symmetry is exact.
 * a < 1: erf(a) = a P(s), s = a^2, P of degree 6 (relative fit error 1.2e-9).
 * 1 <= a < 4: erf(a) = 1 - exp(-a^2) t Q(t), t = 1 / (1 + a/2), Q of degree 6: a fit of
 * erfc(a) exp(a^2) (relative error 3.3e-8 with f32 coefficients; the form of Abramowitz-Stegun
 * 7.1.26, refitted to more terms).
 * a >= 4: exactly 1 (erfc(4) = 1.5e-8 is below half an ulp of 1).
 * Contract: the exp bound over every finite input; saturates to exactly +-1; odd exactly.
 */
static inline float poot_erff(float x) {
    if (x != x) return x;
    float a = poot_absf(x);
    float y;
    if (a < 1.0f) {
        float s = a * a;
        float p = 7.85390730e-5f;
        p = -8.01020884e-4f + s * p;
        p = 5.18832961e-3f + s * p;
        p = -0.0268538129f + s * p;
        p = 0.112835854f + s * p;
        p = -0.376126260f + s * p;
        p = 1.12837911f + s * p;
        y = a * p;
    } else if (a < 4.0f) {
        float t = 1.0f / (1.0f + 0.5f * a);
        float q = 0.0928021222f;
        q = -0.379511982f + t * q;
        q = 0.428828746f + t * q;
        q = 0.00485114334f + t * q;
        q = 0.295811266f + t * q;
        q = 0.274493903f + t * q;
        q = 0.282593101f + t * q;
        y = 1.0f - poot_expf(-(a * a)) * (t * q);
    } else {
        y = 1.0f;
    }
    return poot_copysignf(y, x);
}

/* sqrt(x).
 * Method: a bit-halving estimate (the bit pattern shifted right by one halves the exponent, plus
 * a constant that re-biases it and centres the error on the mantissa), then exactly four Newton
 * steps y = (y + x / y) / 2; subnormals are scaled by 2^24 first and the root by 2^-12 after.
 * Contract: relative error <= 4e-7 over the positive normal numbers. Also sqrt(+-0) = +-0,
 * sqrt(+inf) = +inf, negative or NaN -> NaN.
 */
static inline float poot_sqrtf(float x) {
    if (!(x > 0.0f)) return x == 0.0f ? x : poot_nanf();
    if (x > POOT_FLT_MAX) return x;
    float scale = 1.0f;
    if (x < POOT_FLT_MIN) {
        x = x * 16777216.0f;   /* 2^24 */
        scale = 2.44140625e-4f; /* 2^-12 */
    }
    float y = poot_f32_from_bits((poot_f32_bits(x) >> 1) + 0x1fbd1df5u);
    y = 0.5f * (y + x / y);
    y = 0.5f * (y + x / y);
    y = 0.5f * (y + x / y);
    y = 0.5f * (y + x / y);
    return y * scale;
}

#endif /* POOT_MATH_H */
