// gguf_linear.cc: an OpenVINO operation that multiplies activations by a
// weight matrix kept in the GGUF file's own Q4_1 blocks, the way llama.cpp
// does on a CPU without VNNI, where the CPU plugin widens every int4 weight
// to f32 before its multiply-add (its dynamic quantization of activations
// needs avx2_vnni or avx512_core_vnni).
//
//   GGUFLinear(x f32 [..., K], blocks u8 [N, K/32*20]) -> y f32 [..., N]
//   y[.., n] = sum over k of x[.., k] * w[n, k]
//
// Each row of blocks is the row's K/32 Q4_1 blocks as the file stores them
// (f16 scale d, f16 minimum m, 16 bytes of nibbles: element i in the low
// nibble of byte i, element i+16 in the high one; w = d*q + m).
//
// Attribute activations:
//   "f32": exact; each block's products in f32 (d * sum(q*x) + m * sum(x)).
//   "q8":  x is quantized per 32 elements to int8 with an f32 scale (as
//          llama.cpp's Q8_1), the products in integer instructions
//          (vpmaddubsw); the minimum's term uses the exact f32 sum of x.
//          Not the file's model: its error is stated in docs/benchmarks.md.
//
// The CPU plugin runs an operation it does not know through its evaluate
// (a "Reference" node), reading the constant's memory where it is: the
// weights stay in the pages of the blob they were mapped from, laid out
// once by the file, not by the plugin on the first call. Rows are split
// over the plugin's TBB arena.
//
// Built by `make build` against the wheel's headers into the folder of its
// libopenvino and loaded by package ov with ov_core_add_extension.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <openvino/core/extension.hpp>
#include <openvino/core/op_extension.hpp>
#include <openvino/op/op.hpp>
#include <string>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <vector>

namespace {

constexpr size_t kBlock = 32;       // elements per Q4_1 block
constexpr size_t kBlockBytes = 20;  // bytes per Q4_1 block

inline float f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
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
        const float am = _mm_cvtss_f32(m4);
        const float d = am / 127.0f;
        const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
        __m256i i32[4];
        for (int j = 0; j < 4; ++j) {
            i32[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
        // Pack 32 int32 to 32 int8 in order (packs interleave 128-bit lanes; the permute undoes it).
        __m256i i16a = _mm256_packs_epi32(i32[0], i32[1]);
        __m256i i16b = _mm256_packs_epi32(i32[2], i32[3]);
        __m256i i8 = _mm256_packs_epi16(i16a, i16b);
        i8 = _mm256_permutevar8x32_epi32(i8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(r.q.data() + b * kBlock), i8);
        r.d[b] = d;
        r.sum[b] = hsum(s);
    }
}

// The layout the kernels read ("q4_1x8"): each run of 8 rows is repacked
// once, at conversion, block by block. For rows r = 0..7 and block b of
// their 32-element Q4_1 blocks, 160 bytes: the 8 scales d (f16), the 8
// minima m (f16), then 128 bytes of nibbles, where byte 32j + 4r + i
// (j, i = 0..3) holds row r's element 4j+i in its low nibble and element
// 16+4j+i in its high one. One 32-byte load then holds 4 elements of each
// of the 8 rows, and a product with 4 elements of x broadcast gives the 8
// rows' partial sums in the 8 lanes: no horizontal sums.
constexpr size_t kRows = 8;
constexpr size_t kGroupBytes = kRows * kBlockBytes;  // 160


inline __m256 loadF16x8(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// dotQ8 writes y[0..8) for the 8 rows of group (nb blocks), x quantized.
template <bool VNNI>
void dotQ8(const uint8_t* group, const Q8Row& x, size_t nb, float* y);

template <>
void dotQ8<false>(const uint8_t* group, const Q8Row& x, size_t nb, float* y) {
    const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps(), accMin = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; ++b) {
        const uint8_t* g = group + b * kGroupBytes;
        const int8_t* xb = x.q.data() + b * kBlock;
        __m256i s = _mm256_setzero_si256();  // i16: at most 8 * 2 * 15 * 127 = 30480
        for (int j = 0; j < 4; ++j) {
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 32 + 32 * j));
            s = _mm256_add_epi16(s, _mm256_maddubs_epi16(_mm256_and_si256(q, low), bcast4(xb + 4 * j)));
            s = _mm256_add_epi16(s, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), low), bcast4(xb + 16 + 4 * j)));
        }
        const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(s, ones));
        acc = _mm256_fmadd_ps(_mm256_mul_ps(loadF16x8(g), _mm256_set1_ps(x.d[b])), p, acc);
        accMin = _mm256_fmadd_ps(loadF16x8(g + 16), _mm256_set1_ps(x.sum[b]), accMin);
    }
    _mm256_storeu_ps(y, _mm256_add_ps(acc, accMin));
}

// With VNNI (AVX512_VNNI with VL): the products accumulate in i32 in one
// instruction each.
template <>
__attribute__((target("avx512vnni,avx512vl"))) void dotQ8<true>(const uint8_t* group, const Q8Row& x, size_t nb, float* y) {
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps(), accMin = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; ++b) {
        const uint8_t* g = group + b * kGroupBytes;
        const int8_t* xb = x.q.data() + b * kBlock;
        __m256i s = _mm256_setzero_si256();
        for (int j = 0; j < 4; ++j) {
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 32 + 32 * j));
            s = _mm256_dpbusd_epi32(s, _mm256_and_si256(q, low), bcast4(xb + 4 * j));
            s = _mm256_dpbusd_epi32(s, _mm256_and_si256(_mm256_srli_epi16(q, 4), low), bcast4(xb + 16 + 4 * j));
        }
        acc = _mm256_fmadd_ps(_mm256_mul_ps(loadF16x8(g), _mm256_set1_ps(x.d[b])), _mm256_cvtepi32_ps(s), acc);
        accMin = _mm256_fmadd_ps(loadF16x8(g + 16), _mm256_set1_ps(x.sum[b]), accMin);
    }
    _mm256_storeu_ps(y, _mm256_add_ps(acc, accMin));
}

// dotF32 is dotQ8 with x exact: each weight widened to f32 (lane r's byte i
// shifted down), two partial sums per block against the FMA latency.
void dotF32(const uint8_t* group, const float* x, const float* sums, size_t nb, float* y) {
    const __m256i low = _mm256_set1_epi8(0x0F), byte = _mm256_set1_epi32(0xFF);
    __m256 acc = _mm256_setzero_ps(), accMin = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; ++b) {
        const uint8_t* g = group + b * kGroupBytes;
        const float* xb = x + b * kBlock;
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        for (int j = 0; j < 4; ++j) {
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 32 + 32 * j));
            const __m256i lo = _mm256_and_si256(q, low), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
#define OVRUN_LANE(i)                                                                                                \
    s0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(lo, 8 * (i)), byte)),                   \
                         _mm256_broadcast_ss(xb + 4 * j + (i)), s0);                                                   \
    s1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(hi, 8 * (i)), byte)),                   \
                         _mm256_broadcast_ss(xb + 16 + 4 * j + (i)), s1);
            OVRUN_LANE(0) OVRUN_LANE(1) OVRUN_LANE(2) OVRUN_LANE(3)
#undef OVRUN_LANE
        }
        acc = _mm256_fmadd_ps(loadF16x8(g), _mm256_add_ps(s0, s1), acc);
        accMin = _mm256_fmadd_ps(loadF16x8(g + 16), _mm256_set1_ps(sums[b]), accMin);
    }
    _mm256_storeu_ps(y, _mm256_add_ps(acc, accMin));
}

class GGUFLinear : public ov::op::Op {
public:
    OPENVINO_OP("GGUFLinear", "ovrun");

    GGUFLinear() = default;
    GGUFLinear(const ov::Output<ov::Node>& x, const ov::Output<ov::Node>& blocks, std::string type, std::string activations)
        : Op({x, blocks}), m_type(std::move(type)), m_activations(std::move(activations)) {
        constructor_validate_and_infer_types();
    }

    void validate_and_infer_types() override {
        NODE_VALIDATION_CHECK(this, m_type == "q4_1x8", "GGUFLinear: type must be q4_1x8, not ", m_type);
        NODE_VALIDATION_CHECK(this, m_activations == "f32" || m_activations == "q8",
                              "GGUFLinear: activations must be f32 or q8, not ", m_activations);
        NODE_VALIDATION_CHECK(this, get_input_element_type(0) == ov::element::f32, "GGUFLinear: x must be f32");
        NODE_VALIDATION_CHECK(this, get_input_element_type(1) == ov::element::u8, "GGUFLinear: blocks must be u8");
        const ov::PartialShape& xs = get_input_partial_shape(0);
        const ov::PartialShape& ws = get_input_partial_shape(1);
        NODE_VALIDATION_CHECK(this, ws.rank().is_static() && ws.rank().get_length() == 2 && ws.is_static(),
                              "GGUFLinear: blocks must be a static [N, K/32*20]");
        NODE_VALIDATION_CHECK(this, ws[0].get_length() % kRows == 0, "GGUFLinear: N must be a multiple of ", kRows);
        ov::PartialShape ys = xs;
        if (xs.rank().is_static()) {
            const auto r = xs.rank().get_length();
            NODE_VALIDATION_CHECK(this, r >= 1, "GGUFLinear: x needs a last dimension");
            const ov::Dimension& k = xs[r - 1];
            NODE_VALIDATION_CHECK(this, k.is_static() && k.get_length() % kBlock == 0 &&
                                            static_cast<size_t>(k.get_length()) / kBlock * kBlockBytes ==
                                                static_cast<size_t>(ws[1].get_length()),
                                  "GGUFLinear: x's last dimension must be K, a multiple of 32, for blocks [N, K/32*20]");
            ys[r - 1] = ws[0];
        }
        set_output_type(0, ov::element::f32, ys);
    }

    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override {
        check_new_args_count(this, args);
        return std::make_shared<GGUFLinear>(args.at(0), args.at(1), m_type, m_activations);
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
        const size_t K = xs.back();
        const size_t N = w.get_shape()[0];
        const size_t M = K == 0 ? 0 : x.get_size() / K;
        ov::Shape ys = xs;
        ys.back() = N;
        outputs[0].set_shape(ys);
        const float* xp = x.data<const float>();
        const uint8_t* wp = static_cast<const uint8_t*>(w.data());
        float* yp = outputs[0].data<float>();
        const size_t nb = K / kBlock, rowBytes = nb * kBlockBytes;
        const size_t groups = N / kRows;
        if (m_activations == "q8") {
            static const bool vnni = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
                                     std::getenv("OVRUN_GGUF_LINEAR_NO_VNNI") == nullptr;
            std::vector<Q8Row> q(M);
            for (size_t m = 0; m < M; ++m) {
                quantizeRow(xp + m * K, K, q[m]);
            }
            tbb::parallel_for(tbb::blocked_range<size_t>(0, groups), [&](const tbb::blocked_range<size_t>& r) {
                for (size_t c = r.begin(); c != r.end(); ++c) {
                    const uint8_t* g = wp + c * kRows * rowBytes;
                    for (size_t m = 0; m < M; ++m) {
                        if (vnni) {
                            dotQ8<true>(g, q[m], nb, yp + m * N + c * kRows);
                        } else {
                            dotQ8<false>(g, q[m], nb, yp + m * N + c * kRows);
                        }
                    }
                }
            }, tbb::static_partitioner());
            return true;
        }
        std::vector<float> sums(M * nb);
        for (size_t m = 0; m < M; ++m) {
            for (size_t b = 0; b < nb; ++b) {
                float s = 0.0f;
                for (size_t i = 0; i < kBlock; ++i) {
                    s += xp[m * K + b * kBlock + i];
                }
                sums[m * nb + b] = s;
            }
        }
        tbb::parallel_for(tbb::blocked_range<size_t>(0, groups), [&](const tbb::blocked_range<size_t>& r) {
            for (size_t c = r.begin(); c != r.end(); ++c) {
                const uint8_t* g = wp + c * kRows * rowBytes;
                for (size_t m = 0; m < M; ++m) {
                    dotF32(g, xp + m * K, sums.data() + m * nb, nb, yp + m * N + c * kRows);
                }
            }
        }, tbb::static_partitioner());
        return true;
    }

private:
    std::string m_type = "q4_1x8";
    std::string m_activations = "f32";
};

}  // namespace

OPENVINO_CREATE_EXTENSIONS(std::vector<ov::Extension::Ptr>({std::make_shared<ov::OpExtension<GGUFLinear>>()}));
