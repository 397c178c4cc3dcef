// dyncast_memo.cc: memoize the C++ runtime's __dynamic_cast for a process,
// through LD_PRELOAD, without rebuilding anything.
//
// OpenVINO 2026.3 implements ov::as_type_ptr<T> and ov::as_type<T> with
// dynamic_cast (openvino/core/type.hpp: use_ov_dynamic_cast is false for
// everything but frontend conversion extensions), so the CPU plugin's
// transformation passes cast the same few node types to the same few
// targets hundreds of thousands of times per compile. Every such cast walks
// the most-derived type's base classes in libstdc++ and compares type_info
// objects, by name (strcmp) when their pointers differ. Both libopenvino.so
// and libopenvino_intel_cpu_plugin.so call __dynamic_cast through their PLT
// (R_X86_64_JUMP_SLOT __dynamic_cast@CXXABI_1.3), so a definition that comes
// first in the global lookup scope, as a preloaded library's does, receives
// every one of those calls.
//
// The memo. The result of __dynamic_cast(src, src_type, dst_type, src2dst)
// is a function of where src points inside its complete object, and of that
// object's dynamic type: the vtable pointer stored at src (which determines
// the complete type, src's offset inside it and so every other subobject's
// place), the complete object's own vtable pointer (libstdc++ checks that it
// names the same complete type; it does not during construction), the two
// type_info objects and the hint. With that key the answer is always the
// same displacement from src, or null. Each thread keeps a two-way
// set-associative table of 16384 such entries (no locks, no allocation after the first call);
// a miss asks libstdc++ and stores its answer. What the memo returns is what
// libstdc++ returned for the same key, so the compiler takes the same
// decisions and produces the same model.
//
// Assumption: a vtable address keeps meaning one (dynamic type, subobject)
// for the life of the process, i.e. no library that owns a vtable is
// unloaded and another loaded at the same address while casts run (dlclose
// during a compile). OVTRACE_MEMO_VERIFY=1 checks every hit against
// libstdc++ and counts disagreements.
//
// Counters. The process writes no file at exit (a Go program such as
// ovtrace leaves through exit_group, which runs no destructors), so when
// OVTRACE_MEMO_STATS names a file the counters live in it: a shared mapping
// of a fixed layout (below), updated as the calls happen, complete whenever
// the process stops. Each thread owns one slot and increments it without
// atomics. `ovtrace ab` reads the file; ovtrace_memo_counters() sums it in
// process; OVTRACE_MEMO_REPORT=1 prints one line at a normal C exit.
//
// File layout (version 1, native byte order; 64-bit x86 is little-endian):
//   0    char[8]   magic "OVTMEMO1"
//   8    uint32    version (1)
//   12   uint32    slot size in bytes (64)
//   16   uint32    slots in the file (slot 0 is shared, updated atomically)
//   20   uint32    slots claimed (atomic; beyond the file's slots, threads
//                  share slot 0)
//   24   uint32    counters per slot
//   28   uint32    reserved
//   32   char[32]  patch name, NUL-padded
//   64   char[64]  counter names, comma-separated, NUL-padded
//   128  slots: counters per slot x uint64

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT extern "C" __attribute__((visibility("default")))

static int sum_counters(uint64_t* out, int n);

namespace {

using DynCastFn = void* (*)(const void*, const void*, const void*, ptrdiff_t);

constexpr char kPatch[] = "dyncast-memo";
constexpr char kCounterNames[] = "calls,hits,misses,evictions,verified,mismatches";
enum Counter { kCalls, kHits, kMisses, kEvictions, kVerified, kMismatches, kNumCounters };

constexpr uint32_t kVersion = 1;
constexpr uint32_t kSlotBytes = 64;
constexpr uint32_t kSlots = 256;
constexpr size_t kHeaderBytes = 128;
constexpr size_t kFileBytes = kHeaderBytes + size_t(kSlots) * kSlotBytes;

struct Header {
    char magic[8];
    uint32_t version, slot_bytes, slots, used, counters, reserved;
    char patch[32];
    char counter_names[64];
};
static_assert(sizeof(Header) == kHeaderBytes, "header layout");

struct alignas(64) Slot {
    uint64_t c[kSlotBytes / sizeof(uint64_t)];
};
static_assert(sizeof(Slot) == kSlotBytes, "slot layout");

// The table: 2^14 entries per thread in two-way sets (768 KiB, touched as used).
constexpr unsigned kTableBits = 14;

struct Entry {
    const void* vptr;        // vtable pointer stored at src; null: empty
    const void* whole_vptr;  // vtable pointer of the complete object
    const void* src_type;
    const void* dst_type;
    ptrdiff_t src2dst;
    ptrdiff_t delta;         // result - src; kNull: the cast failed
};
constexpr ptrdiff_t kNull = PTRDIFF_MIN;

struct Table {
    Entry e[size_t(1) << kTableBits];
};

DynCastFn real_dynamic_cast;
bool verify;

// Counters when no file is named, or the file cannot be used.
Slot private_slots[kSlots];
Header* shared_header;  // the mapped file, or null
Slot* slots = private_slots;
uint32_t private_used = 1;  // slot 0 is the shared one
uint32_t* slots_used = &private_used;
pthread_once_t stats_once = PTHREAD_ONCE_INIT;

// One thread's state: its table and its counter slot (slot 0, shared and
// updated atomically, when the file's slots are all taken).
struct ThreadState {
    Table* table;
    Slot* slot;
    bool shared;
};
__thread ThreadState tls __attribute__((tls_model("initial-exec")));

void resolve() {
    void* f = dlsym(RTLD_NEXT, "__dynamic_cast");
    if (f == nullptr) {
        // libstdc++ loaded with RTLD_LOCAL below us: ask it directly.
        if (void* h = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD)) {
            f = dlsym(h, "__dynamic_cast");
        }
    }
    if (f == nullptr) {
        fprintf(stderr, "%s: cannot find the real __dynamic_cast: %s\n", kPatch, dlerror());
        abort();
    }
    __atomic_store_n(&real_dynamic_cast, reinterpret_cast<DynCastFn>(f), __ATOMIC_RELEASE);
}

// open_stats maps OVTRACE_MEMO_STATS, creating and initialising it, or
// joining a file another process of the same run created.
void open_stats() {
    const char* path = getenv("OVTRACE_MEMO_STATS");
    if (path == nullptr || *path == 0) {
        return;
    }
    bool created = true;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno == EEXIST) {
        created = false;
        fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    }
    if (fd < 0) {
        fprintf(stderr, "%s: OVTRACE_MEMO_STATS=%s: %s; counting in memory only\n", kPatch, path, strerror(errno));
        return;
    }
    if (created && ftruncate(fd, off_t(kFileBytes)) != 0) {
        fprintf(stderr, "%s: OVTRACE_MEMO_STATS=%s: %s; counting in memory only\n", kPatch, path, strerror(errno));
        close(fd);
        return;
    }
    void* m = mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        fprintf(stderr, "%s: OVTRACE_MEMO_STATS=%s: mmap: %s; counting in memory only\n", kPatch, path, strerror(errno));
        return;
    }
    Header* h = static_cast<Header*>(m);
    if (created) {
        h->version = kVersion;
        h->slot_bytes = kSlotBytes;
        h->slots = kSlots;
        h->used = 1;  // slot 0 is the shared one
        h->counters = kNumCounters;
        memcpy(h->patch, kPatch, sizeof kPatch);
        memcpy(h->counter_names, kCounterNames, sizeof kCounterNames);
        __atomic_thread_fence(__ATOMIC_RELEASE);
        memcpy(h->magic, "OVTMEMO1", 8);
    } else {
        // Another process creates it: wait up to a second for its header.
        for (int i = 0; i < 1000 && memcmp(h->magic, "OVTMEMO1", 8) != 0; i++) {
            usleep(1000);
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (memcmp(h->magic, "OVTMEMO1", 8) != 0 || h->version != kVersion || h->slots != kSlots ||
            h->counters != kNumCounters) {
            fprintf(stderr, "%s: OVTRACE_MEMO_STATS=%s is not this patch's counter file; counting in memory only\n",
                    kPatch, path);
            munmap(m, kFileBytes);
            return;
        }
    }
    shared_header = h;
    slots = reinterpret_cast<Slot*>(static_cast<char*>(m) + kHeaderBytes);
    slots_used = &h->used;
}

// claim_slot gives the calling thread its own slot, or the shared slot 0
// when all are taken.
void claim_slot(ThreadState* ts) {
    pthread_once(&stats_once, open_stats);
    uint32_t i = __atomic_fetch_add(slots_used, 1, __ATOMIC_RELAXED);
    ts->shared = i >= kSlots;
    ts->slot = ts->shared ? &slots[0] : &slots[i];
}

__attribute__((always_inline)) inline void count(const ThreadState* ts, Counter c) {
    if (__builtin_expect(ts->shared, 0)) {
        __atomic_fetch_add(&ts->slot->c[c], 1, __ATOMIC_RELAXED);
    } else {
        ts->slot->c[c]++;
    }
}

// start_thread sets up the calling thread's slot and table; false when the
// table cannot be mapped (the thread then always asks libstdc++).
bool start_thread(ThreadState* ts) {
    if (ts->slot == nullptr) {
        claim_slot(ts);
    }
    if (ts->table == nullptr) {
        void* m = mmap(nullptr, sizeof(Table), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            return false;
        }
        ts->table = static_cast<Table*>(m);
    }
    return true;
}

inline size_t index_of(const void* vptr, const void* dst_type) {
    uint64_t h = uint64_t(uintptr_t(vptr)) ^ (uint64_t(uintptr_t(dst_type)) * 0x9E3779B97F4A7C15ull);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return size_t(h >> (64 - kTableBits));
}

inline DynCastFn real() {
    DynCastFn f = __atomic_load_n(&real_dynamic_cast, __ATOMIC_ACQUIRE);
    if (__builtin_expect(f == nullptr, 0)) {
        resolve();
        f = real_dynamic_cast;
    }
    return f;
}

__attribute__((constructor)) void init() {
    resolve();
    const char* v = getenv("OVTRACE_MEMO_VERIFY");
    verify = v != nullptr && strcmp(v, "1") == 0;
}

__attribute__((destructor)) void report() {
    const char* r = getenv("OVTRACE_MEMO_REPORT");
    if (r == nullptr || strcmp(r, "1") != 0) {
        return;
    }
    uint64_t c[kNumCounters];
    sum_counters(c, kNumCounters);
    fprintf(stderr, "%s: %llu calls, %llu hits (%.2f%%), %llu misses, %llu evictions, %llu verified, %llu mismatches\n",
            kPatch, (unsigned long long)c[kCalls], (unsigned long long)c[kHits],
            c[kCalls] ? 100.0 * double(c[kHits]) / double(c[kCalls]) : 0.0, (unsigned long long)c[kMisses],
            (unsigned long long)c[kEvictions], (unsigned long long)c[kVerified], (unsigned long long)c[kMismatches]);
}

}  // namespace

static int sum_counters(uint64_t* out, int n) {
    pthread_once(&stats_once, open_stats);
    int k = n < kNumCounters ? n : kNumCounters;
    for (int j = 0; j < k; j++) {
        out[j] = 0;
    }
    uint32_t used = __atomic_load_n(slots_used, __ATOMIC_RELAXED);
    if (used > kSlots) {
        used = kSlots;
    }
    for (uint32_t i = 0; i < used; i++) {
        for (int j = 0; j < k; j++) {
            out[j] += __atomic_load_n(&slots[i].c[j], __ATOMIC_RELAXED);
        }
    }
    return kNumCounters;
}

namespace {

inline bool matches(const Entry* e, const void* vptr, const void* whole_vptr, const void* src_type,
                    const void* dst_type, ptrdiff_t src2dst) {
    return e->vptr == vptr && e->dst_type == dst_type && e->src_type == src_type && e->src2dst == src2dst &&
           e->whole_vptr == whole_vptr;
}

inline void* apply(const Entry* e, const void* src) {
    return e->delta == kNull ? nullptr : const_cast<char*>(static_cast<const char*>(src) + e->delta);
}

// slow_path is everything but a hit without verification: a thread's first
// call, a null source, verification, and a miss (ask libstdc++, remember).
__attribute__((noinline)) void* slow_path(const void* src, const void* src_type, const void* dst_type,
                                          ptrdiff_t src2dst) {
    ThreadState* ts = &tls;
    if (src == nullptr || !start_thread(ts)) {
        return real()(src, src_type, dst_type, src2dst);
    }
    count(ts, kCalls);
    const void* vptr = *static_cast<const void* const*>(src);
    ptrdiff_t to_top = static_cast<const ptrdiff_t*>(vptr)[-2];
    const void* whole_vptr = *reinterpret_cast<const void* const*>(static_cast<const char*>(src) + to_top);
    Entry* set = &ts->table->e[index_of(vptr, dst_type) & ~size_t(1)];
    for (int way = 0; way < 2; way++) {
        if (matches(&set[way], vptr, whole_vptr, src_type, dst_type, src2dst)) {
            count(ts, kHits);
            void* r = apply(&set[way], src);
            if (verify) {
                void* want = real()(src, src_type, dst_type, src2dst);
                count(ts, kVerified);
                if (want != r) {
                    count(ts, kMismatches);
                    return want;
                }
            }
            return r;
        }
    }
    count(ts, kMisses);
    if (set[1].vptr != nullptr) {
        count(ts, kEvictions);
    }
    void* r = real()(src, src_type, dst_type, src2dst);
    set[1] = set[0];  // the most recent entry first
    Entry* e = &set[0];
    e->vptr = vptr;
    e->whole_vptr = whole_vptr;
    e->src_type = src_type;
    e->dst_type = dst_type;
    e->src2dst = src2dst;
    e->delta = r == nullptr ? kNull : static_cast<const char*>(r) - static_cast<const char*>(src);
    return r;
}

}  // namespace

// ovtrace_memo_counters sums this process's counters (calls, hits, misses,
// evictions, verified, mismatches) into out[0..n) and returns how many
// counters the patch keeps.
EXPORT int ovtrace_memo_counters(uint64_t* out, int n) { return sum_counters(out, n); }

// __dynamic_cast is the Itanium C++ ABI entry point every dynamic_cast to a
// pointer or reference of a class type compiles to (cxxabi.h). A hit is
// answered here, without a stack frame; anything else goes to slow_path.
EXPORT void* __dynamic_cast(const void* src, const void* src_type, const void* dst_type, ptrdiff_t src2dst) {
    ThreadState* ts = &tls;
    Table* t = ts->table;
    if (__builtin_expect(src == nullptr || t == nullptr || verify, 0)) {
        return slow_path(src, src_type, dst_type, src2dst);
    }
    // The same loads libstdc++ starts with: the vtable at src, its
    // offset-to-top, and the complete object's vtable.
    const void* vptr = *static_cast<const void* const*>(src);
    ptrdiff_t to_top = static_cast<const ptrdiff_t*>(vptr)[-2];
    const void* whole_vptr = *reinterpret_cast<const void* const*>(static_cast<const char*>(src) + to_top);
    const Entry* set = &t->e[index_of(vptr, dst_type) & ~size_t(1)];
    for (int way = 0; way < 2; way++) {
        if (matches(&set[way], vptr, whole_vptr, src_type, dst_type, src2dst)) {
            count(ts, kCalls);
            count(ts, kHits);
            return apply(&set[way], src);
        }
    }
    return slow_path(src, src_type, dst_type, src2dst);
}
