// shim.h: the C side of package ov.
//
// libopenvino_c is opened with dlopen at run time; its functions are reached
// through a table of pointers filled by dlsym. Every pointer's type is taken
// from the wheel's own declaration (__typeof__), so a signature change in the
// headers is a compile error here rather than a crash at run time. Go calls
// only the fixed-argument ovr_* wrappers below; the variadic OpenVINO entry
// points are called from C with explicit arguments.
#ifndef OVRUN_OV_SHIM_H
#define OVRUN_OV_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include <openvino/c/openvino.h>

// The most key/value pairs ovr_core_compile_model passes in one call.
#define OVR_MAX_PROPERTY_PAIRS 16

// ovr_open loads the library at path (or by soname through the loader's
// search path) and resolves every symbol. It returns 0 on success, 1 when
// dlopen fails and 2 when a symbol is missing; on failure *err is set to a
// malloc'd message the caller frees with free().
int ovr_open(const char* path, char** err);

// Allocation of host memory Go's collector does not move. ovr_host_alloc
// returns a 64-byte aligned pointer and stores the pointer to pass to
// ovr_host_free in *base; zero asks for zeroed memory.
void* ovr_host_alloc(size_t n, int zero, void** base);
void ovr_host_free(void* base);

// glibc's malloc_trim(0): free heap pages back to the system.
void ovr_malloc_trim(void);

// Errors and version.
const char* ovr_get_last_err_msg(void);
void ovr_free(const char* p);
ov_status_e ovr_get_openvino_version(ov_version_t* v);
void ovr_version_free(ov_version_t* v);

// Core.
ov_status_e ovr_core_create(ov_core_t** core);
void ovr_core_free(ov_core_t* core);
ov_status_e ovr_core_add_extension(const ov_core_t* core, const char* path);
ov_status_e ovr_core_get_available_devices(const ov_core_t* core, ov_available_devices_t* devices);
void ovr_available_devices_free(ov_available_devices_t* devices);
ov_status_e ovr_core_set_property(const ov_core_t* core, const char* device, const char* key, const char* value);
ov_status_e ovr_core_get_property(const ov_core_t* core, const char* device, const char* key, char** value);
ov_status_e ovr_core_read_model_from_memory_buffer(const ov_core_t* core, const char* xml, size_t xml_len,
                                                   const ov_tensor_t* weights, ov_model_t** model);
void ovr_model_free(ov_model_t* model);
ov_status_e ovr_core_compile_model(const ov_core_t* core, const ov_model_t* model, const char* device,
                                   size_t n_pairs, const char** keys, const char** values,
                                   ov_compiled_model_t** out);
ov_status_e ovr_core_import_model(const ov_core_t* core, const char* content, size_t size, const char* device,
                                  ov_compiled_model_t** out);

// Import in place (ov/ext/import_mapped.cc, an optional library of its
// own): ovr_import_mapped_open dlopens it and resolves ovrun_import_mapped
// (0 on success, else *err as ovr_open's); ovr_import_mapped calls it
// (0 on success, 1 with the reason in err).
int ovr_import_mapped_open(const char* path, char** err);
int ovr_import_mapped(const ov_core_t* core, const void* data, size_t size, const char* device,
                      ov_compiled_model_t** out, char* err, size_t errlen);

// Compiled model.
ov_status_e ovr_compiled_model_export_model(const ov_compiled_model_t* cm, const char* path);
ov_status_e ovr_compiled_model_get_property(const ov_compiled_model_t* cm, const char* key, char** value);
ov_status_e ovr_compiled_model_create_infer_request(const ov_compiled_model_t* cm, ov_infer_request_t** out);
void ovr_compiled_model_free(ov_compiled_model_t* cm);

// Infer request.
ov_status_e ovr_infer_request_set_tensor(ov_infer_request_t* r, const char* name, const ov_tensor_t* t);
ov_status_e ovr_infer_request_get_tensor(const ov_infer_request_t* r, const char* name, ov_tensor_t** t);
ov_status_e ovr_infer_request_infer(ov_infer_request_t* r);
ov_status_e ovr_infer_request_start_async(ov_infer_request_t* r);
ov_status_e ovr_infer_request_wait(ov_infer_request_t* r);
ov_status_e ovr_infer_request_cancel(ov_infer_request_t* r);
void ovr_infer_request_free(ov_infer_request_t* r);

// Tensor. Shapes cross as (rank, dims); dims is only read during the call.
ov_status_e ovr_tensor_create(ov_element_type_e type, int64_t rank, const int64_t* dims, ov_tensor_t** out);
ov_status_e ovr_tensor_create_from_host_ptr(ov_element_type_e type, int64_t rank, const int64_t* dims, void* ptr,
                                            ov_tensor_t** out);
ov_status_e ovr_tensor_get_shape(const ov_tensor_t* t, ov_shape_t* shape);
ov_status_e ovr_shape_free(ov_shape_t* shape);
ov_status_e ovr_tensor_get_element_type(const ov_tensor_t* t, ov_element_type_e* type);
ov_status_e ovr_tensor_get_byte_size(const ov_tensor_t* t, size_t* n);
ov_status_e ovr_tensor_data(const ov_tensor_t* t, void** data);
void ovr_tensor_free(ov_tensor_t* t);

#endif
