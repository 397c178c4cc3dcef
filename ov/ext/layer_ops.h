// layer_ops.h: the small operations of a decoder layer that ovrun's kernel
// graphs take as one node each (layer_ops.cc), registered by the kernel's
// library (gguf_linear.cc) beside GGUFLinear and GGUFGather, and the
// helpers both sources use.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <openvino/core/extension.hpp>
#include <openvino/runtime/tensor.hpp>
#include <vector>

namespace ovrun {

// hsum is the sum of v's 8 lanes.
inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// intType reports whether intAt reads tensors of type t: i64, or i32 (the
// CPU plugin may hand an operation's i64 input over as i32).
inline bool intType(const ov::element::Type& t) { return t == ov::element::i64 || t == ov::element::i32; }

// intAt is element i of an i64 or i32 tensor (intType).
inline int64_t intAt(const ov::Tensor& t, size_t i) {
    return t.get_element_type() == ov::element::i64 ? t.data<const int64_t>()[i] : t.data<const int32_t>()[i];
}

// layerOps are the extensions of RMSNorm, RoPE and Attend (domain "ovrun").
std::vector<ov::Extension::Ptr> layerOps();

}  // namespace ovrun
