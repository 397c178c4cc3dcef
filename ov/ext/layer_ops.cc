// layer_ops.cc: a decoder layer's normalization and rotary embedding as one
// operation each, for ovrun's kernel graphs (--weights kernel, kernel-q8).
//
//   RMSNorm(x f32 [..., H], w f32 [H]) -> [..., H]
//     y = x / sqrt(mean(x^2) + eps) * w, attribute eps
//   RoPE(x f32 [...], cos f32 [R, D/2], sin f32 [R, D/2]) -> x's shape
//     x is R rows (tokens) of n heads of D, e.g. [T, n, D] or [1, T, n*D];
//     each head's halves a, b (D/2 each) of row r become
//     a*cos - b*sin and b*cos + a*sin (the rotate-half form of Hugging
//     Face's Llama), attribute head_size D
//
// Written out in opset operations these are 7 and 8 nodes with their
// constants, which the CPU plugin's compile matches back into its own RMS
// and RoPE nodes; SmolLM2's decode graph has 60 of each, and the compile's
// passes take time in proportion to the nodes they walk. As one node each
// they cost the compile nothing to find and run as "Reference" nodes
// through evaluate, like the kernel's products. The mean of squares is
// accumulated in double.
#include "layer_ops.h"

#include <cmath>
#include <cstddef>
#include <memory>
#include <openvino/core/op_extension.hpp>
#include <openvino/op/op.hpp>

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

}  // namespace

std::vector<ov::Extension::Ptr> layerOps() {
    return {std::make_shared<ov::OpExtension<RMSNorm>>(), std::make_shared<ov::OpExtension<RoPE>>()};
}

}  // namespace ovrun
