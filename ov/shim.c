// shim.c: dlopen/dlsym loading of libopenvino_c and fixed-argument wrappers.
#include "shim.h"

#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Every OpenVINO function package ov uses. Adding one here adds a pointer to
// the table and a dlsym lookup; it still needs an ovr_* wrapper below.
#define OVR_SYMBOLS(X)                         \
    X(ov_free)                                 \
    X(ov_get_last_err_msg)                     \
    X(ov_get_openvino_version)                 \
    X(ov_version_free)                         \
    X(ov_core_create)                          \
    X(ov_core_free)                            \
    X(ov_core_add_extension)                   \
    X(ov_core_get_available_devices)           \
    X(ov_available_devices_free)               \
    X(ov_core_set_property)                    \
    X(ov_core_get_property)                    \
    X(ov_core_read_model_from_memory_buffer)   \
    X(ov_model_free)                           \
    X(ov_core_compile_model)                   \
    X(ov_core_import_model)                    \
    X(ov_compiled_model_export_model)          \
    X(ov_compiled_model_get_property)          \
    X(ov_compiled_model_create_infer_request)  \
    X(ov_compiled_model_free)                  \
    X(ov_infer_request_set_tensor)             \
    X(ov_infer_request_get_tensor)             \
    X(ov_infer_request_infer)                  \
    X(ov_infer_request_start_async)            \
    X(ov_infer_request_wait)                   \
    X(ov_infer_request_cancel)                 \
    X(ov_infer_request_free)                   \
    X(ov_tensor_create)                        \
    X(ov_tensor_create_from_host_ptr)          \
    X(ov_tensor_get_shape)                     \
    X(ov_shape_free)                           \
    X(ov_tensor_get_element_type)              \
    X(ov_tensor_get_byte_size)                 \
    X(ov_tensor_data)                          \
    X(ov_tensor_free)

#define OVR_MEMBER(name) __typeof__(&name) name;
typedef struct {
    OVR_SYMBOLS(OVR_MEMBER)
} ovr_api_t;
#undef OVR_MEMBER

static ovr_api_t ovr;
static void* ovr_handle;

static char* ovr_strdup_printf(const char* fmt, const char* a, const char* b) {
    size_t n = strlen(fmt) + strlen(a) + strlen(b) + 1;
    char* s = malloc(n);
    if (s) {
        snprintf(s, n, fmt, a, b);
    }
    return s;
}

int ovr_open(const char* path, char** err) {
    *err = NULL;
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char* e = dlerror();
        *err = ovr_strdup_printf("%s%s", e ? e : "dlopen failed", "");
        return 1;
    }
    ovr_api_t api;
    memset(&api, 0, sizeof api);
#define OVR_RESOLVE(name)                                                      \
    *(void**)(&api.name) = dlsym(h, #name);                                    \
    if (!api.name) {                                                           \
        *err = ovr_strdup_printf("%s: missing symbol %s", path, #name);        \
        dlclose(h);                                                            \
        return 2;                                                              \
    }
    OVR_SYMBOLS(OVR_RESOLVE)
#undef OVR_RESOLVE
    ovr = api;
    ovr_handle = h;
    return 0;
}

// Signal-stack guard.
//
// The CPU plugin, when constructed, installs a sigaltstack of its own on the
// calling thread; its destructor frees that stack but restores the previous
// one only if it runs on the same thread. Go runs successive cgo calls on
// whatever thread the goroutine is on, so the constructing thread could keep
// a freed signal stack, and the next signal to it (Go sends SIGURG for
// preemption) killed the process with SIGSEGV. Every call that can create or
// destroy a plugin (every core call, creating a request, and every free of a
// core, model, compiled model, request or tensor) therefore restores the
// thread's own signal stack when it returns; hot calls (infer, tensor data)
// are left alone. The plugin's stack is only ever active
// during the call that created it, while it is still mapped.
typedef struct {
    stack_t ss;
    int ok;
} ovr_sigstack_t;

static void ovr_sigstack_save(ovr_sigstack_t* g) {
    g->ok = sigaltstack(NULL, &g->ss) == 0;
}

static void ovr_sigstack_restore(const ovr_sigstack_t* g) {
    stack_t cur;
    if (!g->ok || sigaltstack(NULL, &cur) != 0) {
        return;
    }
    int was_off = (g->ss.ss_flags & SS_DISABLE) != 0;
    int is_off = (cur.ss_flags & SS_DISABLE) != 0;
    if (was_off == is_off && (was_off || (cur.ss_sp == g->ss.ss_sp && cur.ss_size == g->ss.ss_size))) {
        return;
    }
    stack_t r = g->ss;
    r.ss_flags = was_off ? SS_DISABLE : 0;
    sigaltstack(&r, NULL);
}

#define OVR_GUARDED(type, call)      \
    ovr_sigstack_t g_;               \
    ovr_sigstack_save(&g_);          \
    type r_ = call;                  \
    ovr_sigstack_restore(&g_);       \
    return r_

#define OVR_GUARDED_VOID(call)       \
    ovr_sigstack_t g_;               \
    ovr_sigstack_save(&g_);          \
    call;                            \
    ovr_sigstack_restore(&g_)

void* ovr_host_alloc(size_t n, int zero, void** base) {
    // Over-allocate and align by hand: calloc keeps glibc's lazily zeroed
    // mmap pages for large buffers, which aligned_alloc+memset would touch.
    size_t total = n + 64;
    void* p = zero ? calloc(1, total) : malloc(total);
    *base = p;
    if (!p) {
        return NULL;
    }
    uintptr_t a = ((uintptr_t)p + 63) & ~(uintptr_t)63;
    return (void*)a;
}

void ovr_host_free(void* base) {
    free(base);
}

const char* ovr_get_last_err_msg(void) {
    return ovr.ov_get_last_err_msg();
}

void ovr_free(const char* p) {
    ovr.ov_free(p);
}

ov_status_e ovr_get_openvino_version(ov_version_t* v) {
    return ovr.ov_get_openvino_version(v);
}

void ovr_version_free(ov_version_t* v) {
    ovr.ov_version_free(v);
}

ov_status_e ovr_core_create(ov_core_t** core) {
    OVR_GUARDED(ov_status_e, ovr.ov_core_create(core));
}

ov_status_e ovr_core_add_extension(const ov_core_t* core, const char* path) {
    OVR_GUARDED(ov_status_e, ovr.ov_core_add_extension(core, path));
}

void ovr_core_free(ov_core_t* core) {
    OVR_GUARDED_VOID(ovr.ov_core_free(core));
}

ov_status_e ovr_core_get_available_devices(const ov_core_t* core, ov_available_devices_t* devices) {
    OVR_GUARDED(ov_status_e, ovr.ov_core_get_available_devices(core, devices));
}

void ovr_available_devices_free(ov_available_devices_t* devices) {
    OVR_GUARDED_VOID(ovr.ov_available_devices_free(devices));
}

ov_status_e ovr_core_set_property(const ov_core_t* core, const char* device, const char* key, const char* value) {
    // ov_core_set_property reads exactly one key/value pair per call.
    OVR_GUARDED(ov_status_e, ovr.ov_core_set_property(core, device, key, value));
}

ov_status_e ovr_core_get_property(const ov_core_t* core, const char* device, const char* key, char** value) {
    OVR_GUARDED(ov_status_e, ovr.ov_core_get_property(core, device, key, value));
}

ov_status_e ovr_core_read_model_from_memory_buffer(const ov_core_t* core, const char* xml, size_t xml_len,
                                                   const ov_tensor_t* weights, ov_model_t** model) {
    OVR_GUARDED(ov_status_e, ovr.ov_core_read_model_from_memory_buffer(core, xml, xml_len, weights, model));
}

void ovr_model_free(ov_model_t* model) {
    OVR_GUARDED_VOID(ovr.ov_model_free(model));
}

// Argument lists for 1..16 key/value pairs of ov_core_compile_model.
#define P(i) keys[i], values[i]
#define P1 P(0)
#define P2 P1, P(1)
#define P3 P2, P(2)
#define P4 P3, P(3)
#define P5 P4, P(4)
#define P6 P5, P(5)
#define P7 P6, P(6)
#define P8 P7, P(7)
#define P9 P8, P(8)
#define P10 P9, P(9)
#define P11 P10, P(10)
#define P12 P11, P(11)
#define P13 P12, P(12)
#define P14 P13, P(13)
#define P15 P14, P(14)
#define P16 P15, P(15)
#define CASE(n) \
    case n:     \
        return f(core, model, device, 2 * n, out, P##n);

static ov_status_e ovr_compile(const ov_core_t* core, const ov_model_t* model, const char* device,
                               size_t n_pairs, const char** keys, const char** values,
                               ov_compiled_model_t** out) {
    __typeof__(ovr.ov_core_compile_model) f = ovr.ov_core_compile_model;
    switch (n_pairs) {
    case 0:
        return f(core, model, device, 0, out);
        CASE(1)
        CASE(2)
        CASE(3)
        CASE(4)
        CASE(5)
        CASE(6)
        CASE(7)
        CASE(8)
        CASE(9)
        CASE(10)
        CASE(11)
        CASE(12)
        CASE(13)
        CASE(14)
        CASE(15)
        CASE(16)
    default:
        return INVALID_C_PARAM;
    }
}

#undef CASE
#undef P

ov_status_e ovr_core_compile_model(const ov_core_t* core, const ov_model_t* model, const char* device,
                                   size_t n_pairs, const char** keys, const char** values,
                                   ov_compiled_model_t** out) {
    OVR_GUARDED(ov_status_e, ovr_compile(core, model, device, n_pairs, keys, values, out));
}

ov_status_e ovr_core_import_model(const ov_core_t* core, const char* content, size_t size, const char* device,
                                  ov_compiled_model_t** out) {
    OVR_GUARDED(ov_status_e, ovr.ov_core_import_model(core, content, size, device, out));
}

ov_status_e ovr_compiled_model_export_model(const ov_compiled_model_t* cm, const char* path) {
    return ovr.ov_compiled_model_export_model(cm, path);
}

ov_status_e ovr_compiled_model_get_property(const ov_compiled_model_t* cm, const char* key, char** value) {
    return ovr.ov_compiled_model_get_property(cm, key, value);
}

ov_status_e ovr_compiled_model_create_infer_request(const ov_compiled_model_t* cm, ov_infer_request_t** out) {
    OVR_GUARDED(ov_status_e, ovr.ov_compiled_model_create_infer_request(cm, out));
}

void ovr_compiled_model_free(ov_compiled_model_t* cm) {
    OVR_GUARDED_VOID(ovr.ov_compiled_model_free(cm));
}

ov_status_e ovr_infer_request_set_tensor(ov_infer_request_t* r, const char* name, const ov_tensor_t* t) {
    return ovr.ov_infer_request_set_tensor(r, name, t);
}

ov_status_e ovr_infer_request_get_tensor(const ov_infer_request_t* r, const char* name, ov_tensor_t** t) {
    return ovr.ov_infer_request_get_tensor(r, name, t);
}

ov_status_e ovr_infer_request_infer(ov_infer_request_t* r) {
    return ovr.ov_infer_request_infer(r);
}

ov_status_e ovr_infer_request_start_async(ov_infer_request_t* r) {
    return ovr.ov_infer_request_start_async(r);
}

ov_status_e ovr_infer_request_wait(ov_infer_request_t* r) {
    return ovr.ov_infer_request_wait(r);
}

ov_status_e ovr_infer_request_cancel(ov_infer_request_t* r) {
    return ovr.ov_infer_request_cancel(r);
}

void ovr_infer_request_free(ov_infer_request_t* r) {
    OVR_GUARDED_VOID(ovr.ov_infer_request_free(r));
}

ov_status_e ovr_tensor_create(ov_element_type_e type, int64_t rank, const int64_t* dims, ov_tensor_t** out) {
    ov_shape_t shape = {rank, (int64_t*)dims};
    return ovr.ov_tensor_create(type, shape, out);
}

ov_status_e ovr_tensor_create_from_host_ptr(ov_element_type_e type, int64_t rank, const int64_t* dims, void* ptr,
                                            ov_tensor_t** out) {
    ov_shape_t shape = {rank, (int64_t*)dims};
    return ovr.ov_tensor_create_from_host_ptr(type, shape, ptr, out);
}

ov_status_e ovr_tensor_get_shape(const ov_tensor_t* t, ov_shape_t* shape) {
    return ovr.ov_tensor_get_shape(t, shape);
}

ov_status_e ovr_shape_free(ov_shape_t* shape) {
    return ovr.ov_shape_free(shape);
}

ov_status_e ovr_tensor_get_element_type(const ov_tensor_t* t, ov_element_type_e* type) {
    return ovr.ov_tensor_get_element_type(t, type);
}

ov_status_e ovr_tensor_get_byte_size(const ov_tensor_t* t, size_t* n) {
    return ovr.ov_tensor_get_byte_size(t, n);
}

ov_status_e ovr_tensor_data(const ov_tensor_t* t, void** data) {
    return ovr.ov_tensor_data(t, data);
}

void ovr_tensor_free(ov_tensor_t* t) {
    OVR_GUARDED_VOID(ovr.ov_tensor_free(t));
}

typedef int (*ovr_import_mapped_fn)(const ov_core_t*, const void*, size_t, const char*, ov_compiled_model_t**, char*,
                                    size_t);
static ovr_import_mapped_fn ovr_import_mapped_ptr;

int ovr_import_mapped_open(const char* path, char** err) {
    *err = NULL;
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char* e = dlerror();
        *err = ovr_strdup_printf("%s%s", e ? e : "dlopen failed", "");
        return 1;
    }
    void* f = dlsym(h, "ovrun_import_mapped");
    if (!f) {
        *err = ovr_strdup_printf("%s: missing symbol %s", path, "ovrun_import_mapped");
        dlclose(h);
        return 2;
    }
    *(void**)(&ovr_import_mapped_ptr) = f;
    return 0;
}

int ovr_import_mapped(const ov_core_t* core, const void* data, size_t size, const char* device,
                      ov_compiled_model_t** out, char* err, size_t errlen) {
    OVR_GUARDED(int, ovr_import_mapped_ptr(core, data, size, device, out, err, errlen));
}

void ovr_malloc_trim(void) {
    malloc_trim(0);
}
