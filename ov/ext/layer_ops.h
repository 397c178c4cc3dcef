// layer_ops.h: the small operations of a decoder layer that ovrun's kernel
// graphs take as one node each (layer_ops.cc), registered by the kernel's
// library (gguf_linear.cc) beside GGUFLinear and GGUFGather.
#pragma once

#include <openvino/core/extension.hpp>
#include <vector>

namespace ovrun {

// layerOps are the extensions of RMSNorm, RoPE and Attend (domain "ovrun").
std::vector<ov::Extension::Ptr> layerOps();

}  // namespace ovrun
