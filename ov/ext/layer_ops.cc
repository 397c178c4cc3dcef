// layer_ops.cc: a decoder layer's normalization, rotary embedding and
// decode-step attention as one operation each, for ovrun's kernel graphs
// (--weights kernel, kernel-q8).
//
//   RMSNorm(x f32 [..., H], w f32 [H]) -> [..., H]
//     y = x / sqrt(mean(x^2) + eps) * w, attribute eps
//   RoPE(x f32 [...], cos f32 [R, D/2], sin f32 [R, D/2]) -> x's shape
//     x is R rows (tokens) of n heads of D, e.g. [T, n, D] or [1, T, n*D];
//     each head's halves a, b (D/2 each) of row r become
//     a*cos - b*sin and b*cos + a*sin (the rotate-half form of Hugging
//     Face's Llama), attribute head_size D
//   Attend(q f32 [1, T, Nh*D], k f32 [1, T, Hkv*D], v f32 [1, T, Hkv*D],
//          table u8 [layers*16], past i64|i32 [1] [, count i64|i32 [1]])
//          -> [1, T, Nh*D] f32
//     one sequence's attention over the caches of layer `layer`, whose
//     addresses the table holds (K then V, 8 bytes little-endian each),
//     each [blocks, Hkv, block, D] of cache_type f32 or bf16 (slot s in
//     block s/block, row s%block: PagedAttentionExtension's layout):
//     writes the chunk's k and v into slots past..past+T-1 (in place, as
//     PagedAttention does), then each query token t attends over slots
//     0..past+t, query head n over KV head n/(Nh/Hkv), scaled by
//     1/sqrt(D); attributes heads, kv_heads, head_size, block, blocks,
//     layer, cache_type. With count, only the first count tokens of the
//     chunk are real: the rest (a static token axis's padding) are
//     neither written nor attended, and their rows of the output are left
//     as they were
//
// Written out in opset operations these are 7 and 8 nodes with their
// constants, which the CPU plugin's compile matches back into its own RMS
// and RoPE nodes; SmolLM2's decode graph has 60 of each, and the compile's
// passes take time in proportion to the nodes they walk. As one node each
// they cost the compile nothing to find and run as "Reference" nodes
// through evaluate, like the kernel's products. The mean of squares is
// accumulated in double.
//
// Attend is the decode step's attention: the CPU plugin's PagedAttention
// node costs 20-37 us a layer before it reads a single slot (SmolLM2 on
// AVX2 at 8 live tokens: 0.6-1.1 ms of a 3.5-8 ms step, as this VM's speed
// varied), where the work of a step over a few hundred slots is a few
// microseconds (Attend: 4 us a layer at 8 live tokens). Its slots are split
// in chunks of kChunk over the plugin's TBB arena, each chunk's softmax
// kept as its maximum, sum and weighted values and the chunks combined
// after (as flash decoding does), so a long context's step reads the cache
// on every core. The caches come as addresses, not inputs: the CPU plugin
// infers the shapes of an operation it does not know on every call when an
// input's shape is dynamic (24 us a layer), and reserves a buffer the size
// of every static input (a capacity's cache, for nothing).
#include "layer_ops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <openvino/core/op_extension.hpp>
#include <openvino/op/op.hpp>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <vector>

namespace ovrun {
namespace {

class RMSNorm : public ov::op::Op {
public:
    OPENVINO_OP("RMSNorm", "ovrun");

    RMSNorm() = default;
    RMSNorm(const ov::Output<ov::Node>& x, const ov::Output<ov::Node>& w, float eps) : Op({x, w}), m_eps(eps) {
        constructor_validate_and_infer_types();
    }

    void validate_and_infer_types() override {
        NODE_VALIDATION_CHECK(this, get_input_element_type(0) == ov::element::f32 && get_input_element_type(1) == ov::element::f32,
                              "x and w must be f32");
        const ov::PartialShape& xs = get_input_partial_shape(0);
        const ov::PartialShape& ws = get_input_partial_shape(1);
        NODE_VALIDATION_CHECK(this, ws.is_static() && ws.rank().get_length() == 1, "w must be a static [H]");
        if (xs.rank().is_static()) {
            const auto r = xs.rank().get_length();
            NODE_VALIDATION_CHECK(this, r >= 1 && xs[r - 1].compatible(ws[0]), "x's last dimension must be H = ", ws[0]);
        }
        NODE_VALIDATION_CHECK(this, m_eps > 0 && std::isfinite(m_eps), "eps must be positive, not ", m_eps);
        set_output_type(0, ov::element::f32, xs);
    }

    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override {
        check_new_args_count(this, args);
        return std::make_shared<RMSNorm>(args.at(0), args.at(1), m_eps);
    }

    bool visit_attributes(ov::AttributeVisitor& visitor) override {
        visitor.on_attribute("eps", m_eps);
        return true;
    }

    bool has_evaluate() const override { return true; }

    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
        const ov::Tensor& x = inputs[0];
        const size_t H = inputs[1].get_size(), rows = H == 0 ? 0 : x.get_size() / H;
        outputs[0].set_shape(x.get_shape());
        const float* xp = x.data<const float>();
        const float* w = inputs[1].data<const float>();
        float* yp = outputs[0].data<float>();
        for (size_t r = 0; r < rows; ++r) {
            const float* xr = xp + r * H;
            float* yr = yp + r * H;
            double ss = 0;
            for (size_t h = 0; h < H; ++h) {
                ss += static_cast<double>(xr[h]) * xr[h];
            }
            const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(H) + m_eps));
            for (size_t h = 0; h < H; ++h) {
                yr[h] = xr[h] * inv * w[h];
            }
        }
        return true;
    }

private:
    float m_eps = 1e-6f;
};

class RoPE : public ov::op::Op {
public:
    OPENVINO_OP("RoPE", "ovrun");

    RoPE() = default;
    RoPE(const ov::Output<ov::Node>& x, const ov::Output<ov::Node>& cos, const ov::Output<ov::Node>& sin, int64_t headSize)
        : Op({x, cos, sin}), m_headSize(headSize) {
        constructor_validate_and_infer_types();
    }

    void validate_and_infer_types() override {
        for (size_t i = 0; i < 3; ++i) {
            NODE_VALIDATION_CHECK(this, get_input_element_type(i) == ov::element::f32, "x, cos and sin must be f32");
        }
        NODE_VALIDATION_CHECK(this, m_headSize > 0 && m_headSize % 2 == 0, "head_size must be even and positive, not ", m_headSize);
        const ov::PartialShape& xs = get_input_partial_shape(0);
        if (xs.rank().is_static()) {
            const auto r = xs.rank().get_length();
            NODE_VALIDATION_CHECK(this, r >= 2, "x must be [..., n*D] of at least rank 2");
            NODE_VALIDATION_CHECK(this, xs[r - 1].is_dynamic() || xs[r - 1].get_length() % m_headSize == 0,
                                  "x's last dimension must be a multiple of head_size ", m_headSize);
        }
        for (size_t i = 1; i < 3; ++i) {
            const ov::PartialShape& cs = get_input_partial_shape(i);
            NODE_VALIDATION_CHECK(this, cs.rank().compatible(2) && (cs.rank().is_dynamic() || cs[1].compatible(m_headSize / 2)),
                                  "cos and sin must be [R, head_size/2]");
        }
        set_output_type(0, ov::element::f32, xs);
    }

    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override {
        check_new_args_count(this, args);
        return std::make_shared<RoPE>(args.at(0), args.at(1), args.at(2), m_headSize);
    }

    bool visit_attributes(ov::AttributeVisitor& visitor) override {
        visitor.on_attribute("head_size", m_headSize);
        return true;
    }

    bool has_evaluate() const override { return true; }

    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
        const ov::Tensor& x = inputs[0];
        const ov::Shape xs = x.get_shape();
        const size_t D = static_cast<size_t>(m_headSize), half = D / 2;
        const size_t rows = inputs[1].get_size() / half;
        const size_t width = rows == 0 ? 0 : x.get_size() / rows, heads = width / D;
        if (inputs[2].get_size() != rows * half || rows * width != x.get_size() || heads * D != width) {
            return false;  // x must be R rows of whole heads, with a cos and sin row each
        }
        outputs[0].set_shape(xs);
        const float* xp = x.data<const float>();
        const float* cp = inputs[1].data<const float>();
        const float* sp = inputs[2].data<const float>();
        float* yp = outputs[0].data<float>();
        for (size_t r = 0; r < rows; ++r) {
            const float* c = cp + r * half;
            const float* s = sp + r * half;
            for (size_t h = 0; h < heads; ++h) {
                const float* a = xp + r * width + h * D;
                const float* b = a + half;
                float* ya = yp + r * width + h * D;
                float* yb = ya + half;
                for (size_t j = 0; j < half; ++j) {
                    const float aj = a[j], bj = b[j];  // y may be x's memory
                    ya[j] = aj * c[j] - bj * s[j];
                    yb[j] = bj * c[j] + aj * s[j];
                }
            }
        }
        return true;
    }

private:
    int64_t m_headSize = 64;
};

// Rows of the cache in each element type, 8 values at a time (D is a
// multiple of 8): load widens to f32, store rounds to nearest even.
struct F32 {
    using T = float;
    static __m256 load(const T* p) { return _mm256_loadu_ps(p); }
    static void store(T* p, __m256 x) { _mm256_storeu_ps(p, x); }
};
struct BF16 {
    using T = uint16_t;
    static __m256 load(const T* p) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
    }
    static void store(T* p, __m256 x) {
        alignas(32) uint32_t b[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(b), _mm256_castps_si256(x));
        for (int i = 0; i < 8; ++i) {
            p[i] = static_cast<uint16_t>((b[i] + 0x7FFF + ((b[i] >> 16) & 1)) >> 16);
        }
    }
};

// hsum8 is the 8 horizontal sums of a[0..7], in order.
inline __m256 hsum8(const __m256* a) {
    const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// exp8 is e^x for x <= 0 (a score less the maximum), to about 2 ulp:
// x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor polynomial
// (error below 3e-8), times 2^n built in the exponent bits; below -87,
// where 2^n would leave the normal floats, it is 0.
inline __m256 exp8(__m256 x) {
    const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);  // ln2 in two parts
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// kChunk is the slots one task attends over; kParallel the slots times
// KV heads (times tokens) below which one thread does it all, sooner
// than wake another.
constexpr size_t kChunk = 64;
constexpr size_t kParallel = 256;

class Attend : public ov::op::Op {
public:
    OPENVINO_OP("Attend", "ovrun");

    Attend() = default;
    Attend(const ov::OutputVector& args, int64_t heads, int64_t kvHeads, int64_t headSize, int64_t block, int64_t blocks, int64_t layer,
           std::string cacheType)
        : Op(args),
          m_heads(heads),
          m_kvHeads(kvHeads),
          m_headSize(headSize),
          m_block(block),
          m_blocks(blocks),
          m_layer(layer),
          m_cacheType(std::move(cacheType)) {
        constructor_validate_and_infer_types();
    }

    void validate_and_infer_types() override {
        NODE_VALIDATION_CHECK(this, get_input_size() == 5 || get_input_size() == 6, "Attend takes q, k, v, the cache table, past and optionally count");
        for (size_t i = 0; i < 3; ++i) {
            NODE_VALIDATION_CHECK(this, get_input_element_type(i) == ov::element::f32, "q, k and v must be f32");
        }
        NODE_VALIDATION_CHECK(this, m_heads > 0 && m_kvHeads > 0 && m_heads % m_kvHeads == 0, "heads must be a positive multiple of kv_heads");
        NODE_VALIDATION_CHECK(this, m_headSize > 0 && m_headSize % 8 == 0, "head_size must be a positive multiple of 8");
        NODE_VALIDATION_CHECK(this, m_block > 0 && m_blocks > 0 && m_layer >= 0, "block, blocks and layer must be positive (layer from 0)");
        // Not f16: Attend writes the cache in place, and the CPU plugin
        // hands an operation it does not know f16 converted to f32 (a copy).
        NODE_VALIDATION_CHECK(this, m_cacheType == "f32" || m_cacheType == "bf16", "cache_type must be f32 or bf16, not ", m_cacheType);
        const ov::PartialShape& ts = get_input_partial_shape(3);
        NODE_VALIDATION_CHECK(this, get_input_element_type(3) == ov::element::u8 && ts.rank().compatible(1) &&
                                        (ts.is_dynamic() || ts[0].get_length() >= 16 * (m_layer + 1)),
                              "the table must be u8 [16 * layers], with layer ", m_layer, "'s row");
        NODE_VALIDATION_CHECK(this, intType(get_input_element_type(4)), "past must be i64 or i32");
        NODE_VALIDATION_CHECK(this, get_input_size() == 5 || intType(get_input_element_type(5)), "count must be i64 or i32");
        const ov::PartialShape& qs = get_input_partial_shape(0);
        NODE_VALIDATION_CHECK(this, qs.rank().compatible(3) && (qs.rank().is_dynamic() || qs[2].compatible(m_heads * m_headSize)),
                              "q must be [1, T, heads*head_size]");
        set_output_type(0, ov::element::f32, qs);
    }

    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override {
        check_new_args_count(this, args);
        return std::make_shared<Attend>(args, m_heads, m_kvHeads, m_headSize, m_block, m_blocks, m_layer, m_cacheType);
    }

    bool visit_attributes(ov::AttributeVisitor& visitor) override {
        visitor.on_attribute("heads", m_heads);
        visitor.on_attribute("kv_heads", m_kvHeads);
        visitor.on_attribute("head_size", m_headSize);
        visitor.on_attribute("block", m_block);
        visitor.on_attribute("blocks", m_blocks);
        visitor.on_attribute("layer", m_layer);
        visitor.on_attribute("cache_type", m_cacheType);
        return true;
    }

    bool has_evaluate() const override { return true; }

    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
        return m_cacheType == "bf16" ? run<BF16>(outputs, inputs) : run<F32>(outputs, inputs);
    }

private:
    template <typename E>
    bool run(ov::TensorVector& outputs, const ov::TensorVector& inputs) const {
        using T = typename E::T;
        const size_t Hkv = static_cast<size_t>(m_kvHeads), B = static_cast<size_t>(m_block), D = static_cast<size_t>(m_headSize);
        const size_t Nh = static_cast<size_t>(m_heads), G = Nh / Hkv;
        const size_t rows = inputs[0].get_size() / (Nh * D);
        size_t T_ = rows;  // the chunk's real tokens
        if (inputs.size() == 6) {
            const int64_t count = intAt(inputs[5], 0);
            if (count < 1 || static_cast<size_t>(count) > rows) {
                return false;
            }
            T_ = static_cast<size_t>(count);
        }
        const int64_t past = intAt(inputs[4], 0);
        const uint8_t* table = static_cast<const uint8_t*>(inputs[3].data());
        uint64_t addr[2] = {0, 0};
        if (inputs[3].get_size() < 16 * static_cast<size_t>(m_layer + 1)) {
            return false;
        }
        std::memcpy(addr, table + 16 * m_layer, sizeof addr);  // little-endian, as the runtime wrote them
        if (addr[0] == 0 || addr[1] == 0 || past < 0 || static_cast<size_t>(past) + T_ > static_cast<size_t>(m_blocks) * B ||
            inputs[1].get_size() != rows * Hkv * D || inputs[2].get_size() != rows * Hkv * D) {
            return false;  // no cache bound, or the chunk does not fit it
        }
        outputs[0].set_shape(inputs[0].get_shape());
        const float* q = inputs[0].data<const float>();
        T* kc = reinterpret_cast<T*>(static_cast<uintptr_t>(addr[0]));
        T* vc = reinterpret_cast<T*>(static_cast<uintptr_t>(addr[1]));
        float* out = outputs[0].data<float>();
        const auto row = [&](T* cache, size_t slot, size_t h) { return cache + ((slot / B * Hkv + h) * B + slot % B) * D; };
        for (size_t t = 0; t < T_; ++t) {  // the chunk's K/V into the caches first
            const float* k = inputs[1].data<const float>() + t * Hkv * D;
            const float* v = inputs[2].data<const float>() + t * Hkv * D;
            for (size_t h = 0; h < Hkv; ++h) {
                for (size_t i = 0; i < D; i += 8) {
                    E::store(row(kc, past + t, h) + i, _mm256_loadu_ps(k + h * D + i));
                    E::store(row(vc, past + t, h) + i, _mm256_loadu_ps(v + h * D + i));
                }
            }
        }
        // Tasks: (token, KV head, chunk of slots); each leaves, per query
        // head of its group, the maximum score, the sum of exp(score - max)
        // and the weighted sum of values: D + 2 floats.
        const size_t span = static_cast<size_t>(past) + T_, chunks = (span + kChunk - 1) / kChunk, W = D + 2;
        const size_t tasks = T_ * Hkv * chunks;
        thread_local std::vector<float> partial;  // the calling thread's, kept between calls
        std::vector<float>& part = partial;
        part.resize(tasks * G * W);
        const float scale = 1.0f / std::sqrt(static_cast<float>(D));
        const auto task = [&](size_t i) {
            const size_t c = i % chunks, h = i / chunks % Hkv, t = i / chunks / Hkv;
            const size_t seen = static_cast<size_t>(past) + t + 1, lo = c * kChunk, hi = std::min(seen, lo + kChunk);
            float* pp = &part[i * G * W];
            if (lo >= hi) {  // past this token's last slot
                for (size_t g = 0; g < G; ++g) {
                    pp[g * W] = -std::numeric_limits<float>::infinity();
                    pp[g * W + 1] = 0;
                }
                return;
            }
            const size_t n = hi - lo;
            alignas(32) float s[kChunk];
            const T* kr[kChunk];  // the chunk's rows, found once
            const T* vr[kChunk];
            for (size_t j = 0; j < n; ++j) {
                kr[j] = row(kc, lo + j, h);
                vr[j] = row(vc, lo + j, h);
            }
            for (size_t g = 0; g < G; ++g) {
                const float* qr = q + (t * Nh + h * G + g) * D;
                // Scores, 8 slots at a time: 8 dot products reduced together.
                size_t j = 0;
                for (; j + 8 <= n; j += 8) {
                    __m256 acc[8];
#pragma GCC unroll 8
                    for (int r = 0; r < 8; ++r) {
                        acc[r] = _mm256_setzero_ps();
                    }
                    for (size_t x = 0; x < D; x += 8) {
                        const __m256 qx = _mm256_loadu_ps(qr + x);
#pragma GCC unroll 8
                        for (int r = 0; r < 8; ++r) {
                            acc[r] = _mm256_fmadd_ps(qx, E::load(kr[j + r] + x), acc[r]);
                        }
                    }
                    _mm256_store_ps(s + j, _mm256_mul_ps(hsum8(acc), _mm256_set1_ps(scale)));
                }
                for (; j < n; ++j) {
                    __m256 acc = _mm256_setzero_ps();
                    for (size_t x = 0; x < D; x += 8) {
                        acc = _mm256_fmadd_ps(_mm256_loadu_ps(qr + x), E::load(kr[j] + x), acc);
                    }
                    s[j] = hsum(acc) * scale;
                }
                float m = -std::numeric_limits<float>::infinity();
                for (j = 0; j < n; ++j) {
                    m = std::max(m, s[j]);
                }
                __m256 l8 = _mm256_setzero_ps();
                const __m256 m8 = _mm256_set1_ps(m);
                for (j = 0; j + 8 <= n; j += 8) {
                    const __m256 e = exp8(_mm256_sub_ps(_mm256_load_ps(s + j), m8));
                    _mm256_store_ps(s + j, e);
                    l8 = _mm256_add_ps(l8, e);
                }
                float l = hsum(l8);
                for (; j < n; ++j) {
                    s[j] = std::exp(s[j] - m);
                    l += s[j];
                }
                pp[g * W] = m;
                pp[g * W + 1] = l;
                // Weighted values, 32 of the head's D at a time in registers.
                float* o = pp + g * W + 2;
                size_t x = 0;
                for (; x + 32 <= D; x += 32) {
                    // Two slots a step, in two sets of accumulators: an FMA
                    // waits for the one before it on the same register.
                    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
                    for (j = 0; j + 2 <= n; j += 2) {
                        const T* v = vr[j] + x;
                        const T* w = vr[j + 1] + x;
                        const __m256 p = _mm256_set1_ps(s[j]), pw = _mm256_set1_ps(s[j + 1]);
                        a0 = _mm256_fmadd_ps(p, E::load(v), a0);
                        a1 = _mm256_fmadd_ps(p, E::load(v + 8), a1);
                        a2 = _mm256_fmadd_ps(p, E::load(v + 16), a2);
                        a3 = _mm256_fmadd_ps(p, E::load(v + 24), a3);
                        b0 = _mm256_fmadd_ps(pw, E::load(w), b0);
                        b1 = _mm256_fmadd_ps(pw, E::load(w + 8), b1);
                        b2 = _mm256_fmadd_ps(pw, E::load(w + 16), b2);
                        b3 = _mm256_fmadd_ps(pw, E::load(w + 24), b3);
                    }
                    if (j < n) {
                        const T* v = vr[j] + x;
                        const __m256 p = _mm256_set1_ps(s[j]);
                        a0 = _mm256_fmadd_ps(p, E::load(v), a0);
                        a1 = _mm256_fmadd_ps(p, E::load(v + 8), a1);
                        a2 = _mm256_fmadd_ps(p, E::load(v + 16), a2);
                        a3 = _mm256_fmadd_ps(p, E::load(v + 24), a3);
                    }
                    _mm256_storeu_ps(o + x, _mm256_add_ps(a0, b0));
                    _mm256_storeu_ps(o + x + 8, _mm256_add_ps(a1, b1));
                    _mm256_storeu_ps(o + x + 16, _mm256_add_ps(a2, b2));
                    _mm256_storeu_ps(o + x + 24, _mm256_add_ps(a3, b3));
                }
                for (; x < D; x += 8) {
                    __m256 a = _mm256_setzero_ps();
                    for (j = 0; j < n; ++j) {
                        a = _mm256_fmadd_ps(_mm256_set1_ps(s[j]), E::load(vr[j] + x), a);
                    }
                    _mm256_storeu_ps(o + x, a);
                }
            }
        };
        if (tasks > 1 && span * Hkv * T_ > kParallel) {
            tbb::parallel_for(tbb::blocked_range<size_t>(0, tasks), [&](const tbb::blocked_range<size_t>& r) {
                for (size_t i = r.begin(); i != r.end(); ++i) {
                    task(i);
                }
            });
        } else {
            for (size_t i = 0; i < tasks; ++i) {
                task(i);
            }
        }
        for (size_t t = 0; t < T_; ++t) {  // the chunks combined
            for (size_t h = 0; h < Hkv; ++h) {
                for (size_t g = 0; g < G; ++g) {
                    const float* first = &part[((t * Hkv + h) * chunks) * G * W + g * W];
                    float m = -std::numeric_limits<float>::infinity();
                    for (size_t c = 0; c < chunks; ++c) {
                        m = std::max(m, first[c * G * W]);
                    }
                    float* o = out + (t * Nh + h * G + g) * D;
                    std::memset(o, 0, D * sizeof(float));
                    float l = 0;
                    for (size_t c = 0; c < chunks; ++c) {
                        const float* pc = first + c * G * W;
                        if (pc[1] == 0) {
                            continue;  // an empty chunk
                        }
                        const float f = std::exp(pc[0] - m);
                        l += f * pc[1];
                        for (size_t x = 0; x < D; ++x) {
                            o[x] += f * pc[2 + x];
                        }
                    }
                    for (size_t x = 0; x < D; ++x) {
                        o[x] /= l;
                    }
                }
            }
        }
        return true;
    }

    int64_t m_heads = 1, m_kvHeads = 1, m_headSize = 8, m_block = 32, m_blocks = 1, m_layer = 0;
    std::string m_cacheType = "f32";
};

}  // namespace

std::vector<ov::Extension::Ptr> layerOps() {
    return {std::make_shared<ov::OpExtension<RMSNorm>>(), std::make_shared<ov::OpExtension<RoPE>>(),
            std::make_shared<ov::OpExtension<Attend>>()};
}

}  // namespace ovrun
