// gguf_linear.cc: OpenVINO operations that read weights in the GGUF file's
// own Q4_1, Q4_0 and Q8_0 blocks, the way llama.cpp does: ovrun's kernel
// (--weights kernel and kernel-q8).
//
//   GGUFLinear(x f32 [..., K], blocks u8 [N, K/32*B] [, rows i32|i64 [1]]) -> y f32 [..., N]
//     y[.., n] = sum over k of x[.., k] * w[n, k] for the first `rows`
//     rows of x (all without the input); the rows after them are left as
//     they were, and with rows 0 or less nothing is computed: the padding
//     of a decode graph's token axis, and its lm_head when the caller
//     wants no logits this call
//   GGUFGather(blocks u8 [V, K/32*B], ids i32|i64 [...]) -> f32 [..., K]
//     the rows ids name (an embedding), zeros for an id out of range
//
// Attribute type: "q4_1x8" (B = 20: an f16 scale d, an f16 minimum m and
// 32 nibbles a block, w = d*q + m), "q4_0x8" (B = 18: an f16 scale d and 32
// nibbles, w = d*(q - 8), taken as Q4_1 with m = -8d computed in f32) or
// "q8_0x8" (B = 34: an f16 scale d and 32 int8 a block, w = d*q). The blocks are the file's, repacked once
// (model/kernel.go) so that one 32-byte load holds 4 elements of each of 8
// rows: for each run of 8 rows and block b, the 8 scales (f16), for Q4_1
// the 8 minima (f16), then the 8 rows' elements, byte 32j + 4r + i holding
// row r's element 4j+i (Q8_0, j = 0..7) or, for Q4_1 and Q4_0 (j = 0..3), element
// 4j+i in its low nibble and 16+4j+i in its high one. A product with 4
// elements of x broadcast then gives the 8 rows' partial sums in the 8
// lanes of a register: no horizontal sums.
//
// GGUFLinear's attribute activations:
//   "f32": exact, each weight widened to f32 (the minimum's term of Q4_1 as
//          m * sum(x) over the block).
//   "q8":  x quantized per 32 elements to int8 with an f32 scale (as
//          llama.cpp's Q8_1), the products in integer instructions
//          (vpmaddubsw, or vpdpbusd with AVX512_VNNI unless
//          ONEDNN_MAX_CPU_ISA excludes it); the minimum's term
//          uses the exact f32 sum of x. Not the file's model: its error is
//          stated in docs/benchmarks.md.
//
// The CPU plugin runs an operation it does not know through its evaluate (a
// "Reference" node), reading the constant's memory where it is: the weights
// stay in the pages of the blob they were mapped from, and the plugin lays
// out no copy of its own on the first call. Rows are split over the
// plugin's TBB arena. Built by `make build` against the wheel's headers
// into the folder of its libopenvino, for AVX2, FMA and F16C, and loaded by
// package ov with ov_core_add_extension where the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <memory>
#include <openvino/core/extension.hpp>
#include <openvino/core/op_extension.hpp>
#include <openvino/op/op.hpp>
#include <string>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <vector>

#include "layer_ops.h"

namespace {

constexpr size_t kBlock = 32;  // elements per block
constexpr size_t kRows = 8;    // rows a run of the layout interleaves

// Format is one block type's layout.
struct Format {
    size_t blockBytes;  // per row and block: 20 (Q4_1), 18 (Q4_0) or 34 (Q8_0)
    bool q4;            // nibbles (Q4_1, Q4_0), else int8 (Q8_0)
    bool min;           // a stored minimum (Q4_1); Q4_0's is -8d
    size_t groupBytes() const { return kRows * blockBytes; }
    size_t quantOffset() const { return min ? 32 : 16; }  // of the elements in a group
};

bool formatOf(const std::string& type, Format& f) {
    if (type == "q4_1x8") {
        f = Format{20, true, true};
        return true;
    }
    if (type == "q4_0x8") {
        f = Format{18, true, false};
        return true;
    }
    if (type == "q8_0x8") {
        f = Format{34, false, false};
        return true;
    }
    return false;
}

// A Q4 group's 8 minima: Q4_1 stores them after the 8 scales; Q4_0's are
// -8d (w = d*(q - 8)), exact in f32.
template <bool MIN>
inline __m256 q4Minima(const uint8_t* g, __m256 d8);

inline float f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

inline __m256 loadF16x8(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <bool MIN>
inline __m256 q4Minima(const uint8_t* g, __m256 d8) {
    if constexpr (MIN) {
        return loadF16x8(g + 16);
    } else {
        return _mm256_mul_ps(d8, _mm256_set1_ps(-8.0f));
    }
}

// The bytes of a Q4 group and the offset of its nibbles.
template <bool MIN>
constexpr size_t q4Group() {
    return MIN ? 160 : 144;
}
template <bool MIN>
constexpr size_t q4Quants() {
    return MIN ? 32 : 16;
}

inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// Activations of one row, quantized: per block an int8 plane, its scale and
// the exact sum of the block's f32 values.
struct Q8Row {
    std::vector<int8_t> q;
    std::vector<float> d, sum;
};

void quantizeRow(const float* x, size_t K, Q8Row& r) {
    const size_t nb = K / kBlock;
    r.q.resize(K);
    r.d.resize(nb);
    r.sum.resize(nb);
    const __m256 signBit = _mm256_set1_ps(-0.0f);
    for (size_t b = 0; b < nb; ++b) {
        const float* xb = x + b * kBlock;
        __m256 v[4];
        __m256 amax = _mm256_setzero_ps(), s = _mm256_setzero_ps();
        for (int j = 0; j < 4; ++j) {
            v[j] = _mm256_loadu_ps(xb + 8 * j);
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(signBit, v[j]));
            s = _mm256_add_ps(s, v[j]);
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float d = _mm_cvtss_f32(m4) / 127.0f;
        const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
        __m256i i32[4];
        for (int j = 0; j < 4; ++j) {
            i32[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
        // 32 int32 to 32 int8 in order (the packs interleave 128-bit lanes; the permute undoes it).
        __m256i i8 = _mm256_packs_epi16(_mm256_packs_epi32(i32[0], i32[1]), _mm256_packs_epi32(i32[2], i32[3]));
        i8 = _mm256_permutevar8x32_epi32(i8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(r.q.data() + b * kBlock), i8);
        r.d[b] = d;
        r.sum[b] = ovrun::hsum(s);
    }
}

// Lane r's byte i of 4 as i32: unsigned (Q4_1's nibbles, masked) or signed.
inline __m256i byteU(__m256i v, int i) { return _mm256_and_si256(_mm256_srli_epi32(v, 8 * i), _mm256_set1_epi32(0xFF)); }
inline __m256i byteS(__m256i v, int i) { return _mm256_srai_epi32(_mm256_slli_epi32(v, 24 - 8 * i), 24); }

// dotF32Q4 writes y[0..8) for the 8 rows of group (nb blocks of Q4_1 or
// Q4_0), x exact: each weight widened to f32, two partial sums per block
// against the FMA latency; the minimum's term is m * sum(x) a block.
template <bool MIN>
void dotF32Q4(const uint8_t* group, const float* x, const float* sums, size_t nb, float* y) {
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps(), accMin = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; ++b) {
        const uint8_t* g = group + b * q4Group<MIN>();
        const float* xb = x + b * kBlock;
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        for (int j = 0; j < 4; ++j) {
            const __m256i q = load32(g + q4Quants<MIN>() + 32 * j);
            const __m256i lo = _mm256_and_si256(q, low), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i) {
                s0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(byteU(lo, i)), _mm256_broadcast_ss(xb + 4 * j + i), s0);
                s1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(byteU(hi, i)), _mm256_broadcast_ss(xb + 16 + 4 * j + i), s1);
            }
        }
        acc = _mm256_fmadd_ps(loadF16x8(g), _mm256_add_ps(s0, s1), acc);
        accMin = _mm256_fmadd_ps(q4Minima<MIN>(g, loadF16x8(g)), _mm256_set1_ps(sums[b]), accMin);
    }
    _mm256_storeu_ps(y, _mm256_add_ps(acc, accMin));
}

// dotF32Q8 is dotF32Q4 for Q8_0 rows.
void dotF32Q8(const uint8_t* group, const float* x, size_t nb, float* y) {
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; ++b) {
        const uint8_t* g = group + b * 272;
        const float* xb = x + b * kBlock;
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        for (int j = 0; j < 8; j += 2) {
            const __m256i w0 = load32(g + 16 + 32 * j), w1 = load32(g + 48 + 32 * j);
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i) {
                s0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(byteS(w0, i)), _mm256_broadcast_ss(xb + 4 * j + i), s0);
                s1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(byteS(w1, i)), _mm256_broadcast_ss(xb + 4 * j + 4 + i), s1);
            }
        }
        acc = _mm256_fmadd_ps(loadF16x8(g), _mm256_add_ps(s0, s1), acc);
    }
    _mm256_storeu_ps(y, acc);
}

// Several tokens (a prompt): each block of a run of 8 rows is unpacked
// once and multiplied by every token's block of x, so the unpacking is not
// repeated per token. acc holds the 8 rows' sums of every token, token by
// token.

// tokensF32 is the exact product of a run with M tokens of x: each block's
// 32 vectors of the 8 rows' quants widened to f32 once.
void tokensF32(const uint8_t* run, const Format& f, size_t nb, const float* x, size_t K, size_t M, const float* sums,
               std::vector<float>& acc) {
    acc.assign(M * kRows, 0.0f);
    __m256 w[32];
    const __m256i low = _mm256_set1_epi8(0x0F);
    for (size_t b = 0; b < nb; ++b) {
        const uint8_t* g = run + b * f.groupBytes();
        if (f.q4) {
            for (int j = 0; j < 4; ++j) {
                const __m256i q = load32(g + f.quantOffset() + 32 * j);
                const __m256i lo = _mm256_and_si256(q, low), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
#pragma GCC unroll 4
                for (int i = 0; i < 4; ++i) {
                    w[4 * j + i] = _mm256_cvtepi32_ps(byteU(lo, i));
                    w[16 + 4 * j + i] = _mm256_cvtepi32_ps(byteU(hi, i));
                }
            }
        } else {
            for (int j = 0; j < 8; ++j) {
                const __m256i q = load32(g + 16 + 32 * j);
#pragma GCC unroll 4
                for (int i = 0; i < 4; ++i) {
                    w[4 * j + i] = _mm256_cvtepi32_ps(byteS(q, i));
                }
            }
        }
        const __m256 d8 = loadF16x8(g);
        const __m256 m8 = !f.q4 ? _mm256_setzero_ps() : f.min ? q4Minima<true>(g, d8) : q4Minima<false>(g, d8);
        for (size_t m = 0; m < M; ++m) {
            const float* xb = x + m * K + b * kBlock;
            __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
#pragma GCC unroll 16
            for (int e = 0; e < 32; e += 2) {
                s0 = _mm256_fmadd_ps(w[e], _mm256_broadcast_ss(xb + e), s0);
                s1 = _mm256_fmadd_ps(w[e + 1], _mm256_broadcast_ss(xb + e + 1), s1);
            }
            __m256 a = _mm256_fmadd_ps(d8, _mm256_add_ps(s0, s1), _mm256_loadu_ps(&acc[m * kRows]));
            if (f.q4) {
                a = _mm256_fmadd_ps(m8, _mm256_set1_ps(sums[m * nb + b]), a);
            }
            _mm256_storeu_ps(&acc[m * kRows], a);
        }
    }
}

// 8-bit activations. The integer products of 8 rows' 4 elements (one
// 32-byte load) with 4 elements of x broadcast: with AVX512_VNNI in one
// instruction (vpdpbusd); without, through i16 (vpmaddubsw), which Q4's
// small values allow to sum over a whole block (8 * 2 * 15 * 127 < 2^15)
// before widening. Q8_0's weights are signed, so the unsigned operand is
// |w| and x takes w's sign (as llama.cpp does), widened each step (2 * 128
// * 127 fills i16 once).
#define OVRUN_VNNI __attribute__((target("avx512vnni,avx512vl")))

// dpbusd is VNNI's product for tileQ8, which is compiled for AVX2: it
// is inlined where tileQ8 is, into tilesVnni's flattened body.
OVRUN_VNNI inline __m256i dpbusd(__m256i s, __m256i u, __m256i x) { return _mm256_dpbusd_epi32(s, u, x); }

// tileQ8 multiplies the 8 rows of a run by NT tokens of x (quantized) over
// all K, the NT x 8 sums kept in registers (NT = 4 fills AVX2's 16: 4 f32
// sums, 4 integer block sums, the quants and constants). Each 32-byte load
// of quants (and Q8_0's |w|, Q4's nibbles unmasked) serves all NT tokens.
// The callers tile the tokens so that a run's blocks stay in L1 from one
// tile to the next and the tokens' bytes in L2 from one run to the next.
template <int NT, bool VNNI, bool Q4, bool MIN>
inline void tileQ8(const uint8_t* run, size_t nb, const Q8Row* x, float* y, size_t ldy) {
    const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    constexpr size_t group = Q4 ? q4Group<MIN>() : 272, quants = Q4 ? q4Quants<MIN>() : 16;
    __m256 acc[NT];
    const int8_t* xq[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
        acc[t] = _mm256_setzero_ps();
        xq[t] = x[t].q.data();
    }
    for (size_t b = 0; b < nb; ++b) {
        const uint8_t* g = run + b * group;
        __m256i s[NT];
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
            s[t] = _mm256_setzero_si256();
        }
        if constexpr (Q4) {
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) {
                const __m256i q = load32(g + quants + 32 * j);
                const __m256i lo = _mm256_and_si256(q, low), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
#pragma GCC unroll 4
                for (int t = 0; t < NT; ++t) {
                    const int8_t* xb = xq[t] + b * kBlock;
                    if constexpr (VNNI) {
                        s[t] = dpbusd(s[t], lo, bcast4(xb + 4 * j));
                        s[t] = dpbusd(s[t], hi, bcast4(xb + 16 + 4 * j));
                    } else {  // i16 sums
                        s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(lo, bcast4(xb + 4 * j)));
                        s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(hi, bcast4(xb + 16 + 4 * j)));
                    }
                }
            }
        } else {
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                const __m256i w = load32(g + quants + 32 * j), u = _mm256_abs_epi8(w);
#pragma GCC unroll 4
                for (int t = 0; t < NT; ++t) {
                    const __m256i xs = _mm256_sign_epi8(bcast4(xq[t] + b * kBlock + 4 * j), w);
                    if constexpr (VNNI) {
                        s[t] = dpbusd(s[t], u, xs);
                    } else {
                        s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u, xs), ones));
                    }
                }
            }
        }
        const __m256 d8 = loadF16x8(g);
        const __m256 m8 = Q4 ? q4Minima<MIN>(g, d8) : _mm256_setzero_ps();  // the block's 8 minima, once for all tokens
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
            __m256i si = s[t];
            if constexpr (Q4 && !VNNI) {
                si = _mm256_madd_epi16(si, ones);
            }
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_set1_ps(x[t].d[b])), _mm256_cvtepi32_ps(si), acc[t]);
            if constexpr (Q4) {
                acc[t] = _mm256_fmadd_ps(m8, _mm256_set1_ps(x[t].sum[b]), acc[t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
        _mm256_storeu_ps(y + t * ldy, acc[t]);
    }
}

// tiles multiplies the runs [r0, r1) of the weights by M tokens of x
// (quantized: a decode step's one or a prompt's), 64 tokens at a time (a
// tile's bytes stay in L2 while each run's pass over it keeps the run's
// blocks in L1), 4 at once.
template <bool VNNI, bool Q4, bool MIN>
inline void tiles(const uint8_t* w, size_t runBytes, size_t nb, size_t r0, size_t r1, const Q8Row* x, size_t M,
                  float* y, size_t N) {
    constexpr size_t outer = 64;
    for (size_t m0 = 0; m0 < M; m0 += outer) {
        const size_t m1 = std::min(M, m0 + outer);
        for (size_t c = r0; c < r1; ++c) {
            const uint8_t* run = w + c * runBytes;
            size_t m = m0;
            for (; m + 4 <= m1; m += 4) {
                tileQ8<4, VNNI, Q4, MIN>(run, nb, x + m, y + m * N + c * kRows, N);
            }
            switch (m1 - m) {
            case 3: tileQ8<3, VNNI, Q4, MIN>(run, nb, x + m, y + m * N + c * kRows, N); break;
            case 2: tileQ8<2, VNNI, Q4, MIN>(run, nb, x + m, y + m * N + c * kRows, N); break;
            case 1: tileQ8<1, VNNI, Q4, MIN>(run, nb, x + m, y + m * N + c * kRows, N); break;
            }
        }
    }
}

// tilesVnni is tiles with AVX512_VNNI's products (flatten: every call
// inlined, dpbusd among them, under this function's target).
template <bool Q4, bool MIN>
OVRUN_VNNI __attribute__((flatten)) void tilesVnni(const uint8_t* w, size_t runBytes, size_t nb, size_t r0, size_t r1,
                                                   const Q8Row* x, size_t M, float* y, size_t N) {
    tiles<true, Q4, MIN>(w, runBytes, nb, r0, r1, x, M, y, N);
}

// tilesAvx2 is tiles with AVX2's products.
template <bool Q4, bool MIN>
__attribute__((flatten)) void tilesAvx2(const uint8_t* w, size_t runBytes, size_t nb, size_t r0, size_t r1,
                                        const Q8Row* x, size_t M, float* y, size_t N) {
    tiles<false, Q4, MIN>(w, runBytes, nb, r0, r1, x, M, y, N);
}

// vnniAllowed reports whether the 8-bit products may use AVX512_VNNI: the
// CPU has it (with AVX512VL), and ONEDNN_MAX_CPU_ISA, where set, names an
// ISA that includes it, as oneDNN reads the variable for the plugin's own
// kernels (scripts/bench-vs-llama.sh --isa avx2 sets AVX2: both run as on
// a CPU without AVX-512).
bool vnniAllowed() {
    if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512vl")) {
        return false;
    }
    const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
    if (isa == nullptr || *isa == '\0') {
        return true;
    }
    for (const char* with : {"AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX",
                             "AVX512_CORE_AMX_FP16", "AVX10_1_512", "AVX10_1_512_AMX", "AVX10_1_512_AMX_FP16", "ALL",
                             "DEFAULT"}) {
        if (strcasecmp(isa, with) == 0) {
            return true;
        }
    }
    return false;
}

// checkBlocks checks a blocks input: a static [N, K/32*B] with N a multiple
// of 8; K is returned.
size_t checkBlocks(const ov::Node* node, const ov::PartialShape& ws, const Format& f) {
    NODE_VALIDATION_CHECK(node, ws.rank().is_static() && ws.rank().get_length() == 2 && ws.is_static(),
                          "blocks must be a static [N, K/32*", f.blockBytes, "]");
    NODE_VALIDATION_CHECK(node, ws[0].get_length() % kRows == 0 && ws[1].get_length() % f.blockBytes == 0,
                          "blocks must be [N, K/32*", f.blockBytes, "] with N a multiple of ", kRows, ", not ", ws);
    return static_cast<size_t>(ws[1].get_length()) / f.blockBytes * kBlock;
}

class GGUFLinear : public ov::op::Op {
public:
    OPENVINO_OP("GGUFLinear", "ovrun");

    GGUFLinear() = default;
    GGUFLinear(const ov::OutputVector& args, std::string type, std::string activations)
        : Op(args), m_type(std::move(type)), m_activations(std::move(activations)) {
        constructor_validate_and_infer_types();
    }

    void validate_and_infer_types() override {
        NODE_VALIDATION_CHECK(this, formatOf(m_type, m_format), "type must be q4_1x8, q4_0x8 or q8_0x8, not ", m_type);
        NODE_VALIDATION_CHECK(this, m_activations == "f32" || m_activations == "q8", "activations must be f32 or q8, not ",
                              m_activations);
        NODE_VALIDATION_CHECK(this, get_input_size() == 2 || get_input_size() == 3, "takes x, blocks and optionally rows");
        NODE_VALIDATION_CHECK(this, get_input_element_type(0) == ov::element::f32, "x must be f32");
        NODE_VALIDATION_CHECK(this, get_input_element_type(1) == ov::element::u8, "blocks must be u8");
        NODE_VALIDATION_CHECK(this, get_input_size() == 2 || ovrun::intType(get_input_element_type(2)), "rows must be i32 or i64");
        const ov::PartialShape& ws = get_input_partial_shape(1);
        const size_t K = checkBlocks(this, ws, m_format);
        ov::PartialShape ys = get_input_partial_shape(0);
        if (ys.rank().is_static()) {
            const auto r = ys.rank().get_length();
            NODE_VALIDATION_CHECK(this, r >= 1 && ys[r - 1].compatible(static_cast<int64_t>(K)),
                                  "x's last dimension must be K = ", K, " for blocks ", ws);
            ys[r - 1] = ws[0];
        }
        set_output_type(0, ov::element::f32, ys);
    }

    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override {
        return std::make_shared<GGUFLinear>(args, m_type, m_activations);
    }

    bool visit_attributes(ov::AttributeVisitor& visitor) override {
        visitor.on_attribute("type", m_type);
        visitor.on_attribute("activations", m_activations);
        return true;
    }

    bool has_evaluate() const override { return true; }

    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
        const ov::Tensor& x = inputs[0];
        const ov::Tensor& w = inputs[1];
        const ov::Shape xs = x.get_shape();
        const size_t K = xs.back(), N = w.get_shape()[0];
        size_t M = K == 0 ? 0 : x.get_size() / K;
        ov::Shape ys = xs;
        ys.back() = N;
        outputs[0].set_shape(ys);
        if (inputs.size() == 3 && inputs[2].get_size() > 0) {  // the first rows alone
            M = static_cast<size_t>(std::clamp<int64_t>(ovrun::intAt(inputs[2], 0), 0, static_cast<int64_t>(M)));
        }
        if (M == 0) {
            return true;  // no product wanted this call
        }
        const float* xp = x.data<const float>();
        const uint8_t* wp = static_cast<const uint8_t*>(w.data());
        float* yp = outputs[0].data<float>();
        const Format f = m_format;
        const size_t nb = K / kBlock, runBytes = nb * f.groupBytes();
        // Each task is a run of 8 rows, for every token: the run's blocks
        // stay in the core's caches from one token to the next.
        const auto split = [&](auto&& run) {
            tbb::parallel_for(
                tbb::blocked_range<size_t>(0, N / kRows),
                [&](const tbb::blocked_range<size_t>& r) {
                    for (size_t c = r.begin(); c != r.end(); ++c) {
                        for (size_t m = 0; m < M; ++m) {
                            run(wp + c * runBytes, m, yp + m * N + c * kRows);
                        }
                    }
                },
                tbb::static_partitioner());
        };
        // Several tokens: a run's blocks unpacked once for all of them.
        const auto splitTokens = [&](auto&& run) {
            tbb::parallel_for(
                tbb::blocked_range<size_t>(0, N / kRows),
                [&](const tbb::blocked_range<size_t>& r) {
                    thread_local std::vector<float> acc;
                    for (size_t c = r.begin(); c != r.end(); ++c) {
                        run(wp + c * runBytes, acc);
                        for (size_t m = 0; m < M; ++m) {
                            std::memcpy(yp + m * N + c * kRows, &acc[m * kRows], kRows * sizeof(float));
                        }
                    }
                },
                tbb::static_partitioner());
        };
        if (m_activations == "q8") {
            static const bool vnni = vnniAllowed();
            // Scratch kept by the calling thread (a decode step calls every
            // operation once, and allocating per call costs more than it
            // does), named by a reference: a thread_local named inside the
            // workers' lambda would be each worker's own.
            thread_local std::vector<Q8Row> qScratch;
            std::vector<Q8Row>& q = qScratch;
            q.resize(M);
            for (size_t m = 0; m < M; ++m) {
                quantizeRow(xp + m * K, K, q[m]);
            }
            const auto tiled = vnni ? (!f.q4 ? tilesVnni<false, false> : f.min ? tilesVnni<true, true> : tilesVnni<true, false>)
                                    : (!f.q4 ? tilesAvx2<false, false> : f.min ? tilesAvx2<true, true> : tilesAvx2<true, false>);
            tbb::parallel_for(
                tbb::blocked_range<size_t>(0, N / kRows),
                [&](const tbb::blocked_range<size_t>& r) { tiled(wp, runBytes, nb, r.begin(), r.end(), q.data(), M, yp, N); },
                tbb::static_partitioner());
            return true;
        }
        thread_local std::vector<float> sumsScratch;
        std::vector<float>& sums = sumsScratch;  // as q above
        sums.assign(f.q4 ? M * nb : 0, 0.0f);
        for (size_t i = 0; i < sums.size(); ++i) {
            const float* xb = xp + i * kBlock;  // block i % nb of row i / nb
            float s = 0.0f;
            for (size_t e = 0; e < kBlock; ++e) {
                s += xb[e];
            }
            sums[i] = s;
        }
        if (M > 1) {
            splitTokens([&](const uint8_t* run, std::vector<float>& acc) { tokensF32(run, f, nb, xp, K, M, sums.data(), acc); });
            return true;
        }
        split([&](const uint8_t* g, size_t m, float* y) {
            if (f.q4) {
                f.min ? dotF32Q4<true>(g, xp + m * K, sums.data() + m * nb, nb, y)
                      : dotF32Q4<false>(g, xp + m * K, sums.data() + m * nb, nb, y);
            } else {
                dotF32Q8(g, xp + m * K, nb, y);
            }
        });
        return true;
    }

private:
    std::string m_type = "q4_1x8";
    std::string m_activations = "f32";
    Format m_format{20, true, true};
};

class GGUFGather : public ov::op::Op {
public:
    OPENVINO_OP("GGUFGather", "ovrun");

    GGUFGather() = default;
    GGUFGather(const ov::Output<ov::Node>& blocks, const ov::Output<ov::Node>& ids, std::string type)
        : Op({blocks, ids}), m_type(std::move(type)) {
        constructor_validate_and_infer_types();
    }

    void validate_and_infer_types() override {
        NODE_VALIDATION_CHECK(this, formatOf(m_type, m_format), "type must be q4_1x8, q4_0x8 or q8_0x8, not ", m_type);
        NODE_VALIDATION_CHECK(this, get_input_element_type(0) == ov::element::u8, "blocks must be u8");
        NODE_VALIDATION_CHECK(this, ovrun::intType(get_input_element_type(1)), "ids must be i32 or i64");
        const size_t K = checkBlocks(this, get_input_partial_shape(0), m_format);
        ov::PartialShape ys = get_input_partial_shape(1);
        if (ys.rank().is_static()) {
            ys.push_back(static_cast<int64_t>(K));
        }
        set_output_type(0, ov::element::f32, ys);
    }

    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override {
        check_new_args_count(this, args);
        return std::make_shared<GGUFGather>(args.at(0), args.at(1), m_type);
    }

    bool visit_attributes(ov::AttributeVisitor& visitor) override {
        visitor.on_attribute("type", m_type);
        return true;
    }

    bool has_evaluate() const override { return true; }

    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
        const ov::Tensor& w = inputs[0];
        const ov::Tensor& ids = inputs[1];
        const Format f = m_format;
        const size_t V = w.get_shape()[0], nb = w.get_shape()[1] / f.blockBytes, K = nb * kBlock;
        ov::Shape ys = ids.get_shape();
        ys.push_back(K);
        outputs[0].set_shape(ys);
        float* yp = outputs[0].data<float>();
        const uint8_t* wp = static_cast<const uint8_t*>(w.data());
        const size_t n = ids.get_size();
        for (size_t t = 0; t < n; ++t) {
            const int64_t id = ovrun::intAt(ids, t);
            float* y = yp + t * K;
            if (id < 0 || static_cast<size_t>(id) >= V) {
                std::memset(y, 0, K * sizeof(float));
                continue;
            }
            const size_t run = static_cast<size_t>(id) / kRows, r = static_cast<size_t>(id) % kRows;
            for (size_t b = 0; b < nb; ++b) {
                const uint8_t* g = wp + (run * nb + b) * f.groupBytes();
                const float d = f16(g + 2 * r), m = !f.q4 ? 0.0f : f.min ? f16(g + 16 + 2 * r) : -8.0f * d;
                const uint8_t* qs = g + f.quantOffset() + 4 * r;
                float* yb = y + b * kBlock;
                for (size_t e = 0; e < (f.q4 ? 16u : 32u); ++e) {
                    const uint8_t q = qs[32 * (e / 4) + e % 4];
                    if (f.q4) {
                        yb[e] = d * static_cast<float>(q & 0x0F) + m;
                        yb[e + 16] = d * static_cast<float>(q >> 4) + m;
                    } else {
                        yb[e] = d * static_cast<float>(static_cast<int8_t>(q));
                    }
                }
            }
        }
        return true;
    }

private:
    std::string m_type = "q8_0x8";
    Format m_format{34, false, false};
};

}  // namespace

namespace {

// extensions are the library's operations: the kernel's two and the layer's
// small ones (layer_ops.cc) its graphs use with them.
std::vector<ov::Extension::Ptr> extensions() {
    std::vector<ov::Extension::Ptr> all{std::make_shared<ov::OpExtension<GGUFLinear>>(),
                                        std::make_shared<ov::OpExtension<GGUFGather>>()};
    for (auto& e : ovrun::layerOps()) {
        all.push_back(e);
    }
    return all;
}

}  // namespace

OPENVINO_CREATE_EXTENSIONS(extensions());
