// import_mapped.cc: import a compiled model from memory that OpenVINO reads
// in place (ov::Core::import_model(const ov::Tensor&)), which the C API
// lacks: its ov_core_import_model wraps the bytes in a stream, and the CPU
// plugin then copies every constant of the blob into memory of its own
// that stays resident with the compiled model. Given a tensor, the plugin
// shares the blob's memory instead (a SharedBuffer over the tensor): with
// the blob mapped from the compiled-rung cache's file, its pages are the
// page cache's, and the caller can drop them from the resident set after
// the import (they fault back in if ever read again). The caller keeps the
// memory mapped until the compiled model is freed.
//
// The function takes and returns the C API's handles. Their layout is the C
// API's own (src/bindings/c/src/common.h: each holds one shared_ptr to the
// C++ object) in the release the headers belong to; package ov refuses a
// library of another release, and this file is built against the same
// headers by `make build`, into the folder of that libopenvino.
#include <cstdio>
#include <exception>
#include <memory>
#include <openvino/runtime/core.hpp>

struct ov_core {
    std::shared_ptr<ov::Core> object;
};

struct ov_compiled_model {
    std::shared_ptr<ov::CompiledModel> object;
};

// ovrun_import_mapped imports the size bytes at data for device. On success
// it returns 0 and sets *out (freed with ov_compiled_model_free); on failure
// it returns 1 and writes the reason into err.
extern "C" __attribute__((visibility("default"))) int ovrun_import_mapped(const ov_core* core, const void* data,
                                                                          size_t size, const char* device,
                                                                          ov_compiled_model** out, char* err,
                                                                          size_t errlen) {
    try {
        ov::Tensor blob(ov::element::u8, ov::Shape{size}, const_cast<void*>(data));
        auto cm = core->object->import_model(blob, device);
        *out = new ov_compiled_model{std::make_shared<ov::CompiledModel>(std::move(cm))};
        return 0;
    } catch (const std::exception& e) {
        std::snprintf(err, errlen, "%s", e.what());
    } catch (...) {
        std::snprintf(err, errlen, "unknown exception");
    }
    return 1;
}
