// paged_attention.cc: an OpenVINO extension that lets the IR reader build
// OpenVINO's own PagedAttentionExtension operation.
//
// libopenvino implements the operation (ov::op::PagedAttentionExtension) and
// the CPU and GPU plugins execute it, but the IR reader knows only the
// standard opsets: GenAI creates the node in memory (SDPAToPagedAttention),
// never from an IR. ovrun writes its graphs as IR, so this library registers
// a factory for type "PagedAttentionExtension", version "extension". The
// header of the class is not in the wheel; the factory calls the
// constructor libopenvino exports, in a buffer larger than the object, and
// reaches the node only through ov::Node's virtual interface.
//
// The CPU plugin reads the cache's head counts and head sizes from the
// node's runtime info (SDPAToPagedAttention sets them); the IR carries them
// as attributes of the layer (num_k_heads, k_head_size, num_v_heads,
// v_head_size), which the factory copies there, or else (blobs the plugin
// exported lack them) the factory takes them from the caches' shapes.
//
// Built by `make build` against the wheel's headers into the folder of its
// libopenvino (the library must be of the same release), and loaded by
// package ov with ov_core_add_extension.
#include <cstdint>
#include <cstdlib>
#include <new>
#include <openvino/core/extension.hpp>
#include <openvino/core/node.hpp>
#include <openvino/core/op_extension.hpp>
#include <openvino/op/op.hpp>

namespace ov {
namespace op {
// The two members libopenvino exports that this file uses; never
// instantiated through this declaration (its size is not the real one).
class PagedAttentionExtension : public ov::op::Op {
public:
    PagedAttentionExtension(const ov::OutputVector& args, bool write_kv_cache);
    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& args) const override;
};
}  // namespace op
}  // namespace ov

namespace {

// kObjectBytes bounds the real object's size (ov::Node itself is a few
// hundred bytes); checked against nothing at run time, so it is generous.
constexpr size_t kObjectBytes = 8192;

class PagedAttentionFactory : public ov::BaseOpExtension {
public:
    const ov::DiscreteTypeInfo& get_type_info() const override {
        static const ov::DiscreteTypeInfo info{"PagedAttentionExtension", "extension"};
        return info;
    }

    ov::OutputVector create(const ov::OutputVector& inputs, ov::AttributeVisitor& visitor) const override {
        void* mem = std::aligned_alloc(64, kObjectBytes);
        if (mem == nullptr) {
            throw std::bad_alloc();
        }
        ov::Node* raw = nullptr;
        try {
            raw = new (mem) ov::op::PagedAttentionExtension(inputs, true);
        } catch (...) {
            std::free(mem);
            throw;
        }
        std::shared_ptr<ov::Node> node(raw, [](ov::Node* n) {
            n->~Node();
            std::free(n);
        });
        node->visit_attributes(visitor);
        // Each attribute, where the layer lacks it, is the cache's static
        // dimension ([blocks, heads, block, head size]; key cache input 3,
        // value cache input 4): a graph the CPU plugin exported (a compiled
        // blob) keeps the caches but writes no such attributes.
        struct Attr {
            const char* name;
            size_t input, dim;
        };
        for (const Attr& a : {Attr{"num_k_heads", 3, 1}, Attr{"k_head_size", 3, 3}, Attr{"num_v_heads", 4, 1},
                              Attr{"v_head_size", 4, 3}}) {
            int64_t v = 0;
            visitor.on_attribute(a.name, v);
            if (v <= 0 && a.input < inputs.size()) {
                const ov::PartialShape& shape = inputs[a.input].get_partial_shape();
                if (shape.rank().is_static() && shape.rank().get_length() == 4 && shape[a.dim].is_static()) {
                    v = shape[a.dim].get_length();
                }
            }
            if (v <= 0) {
                OPENVINO_THROW("PagedAttentionExtension layer needs a positive attribute ", a.name,
                               " or a cache input with that dimension static");
            }
            node->get_rt_info()[a.name] = static_cast<size_t>(v);
        }
        node->validate_and_infer_types();
        return node->outputs();
    }

    std::vector<ov::Extension::Ptr> get_attached_extensions() const override { return {}; }
};

}  // namespace

OPENVINO_CREATE_EXTENSIONS(std::vector<ov::Extension::Ptr>({std::make_shared<PagedAttentionFactory>()}));
