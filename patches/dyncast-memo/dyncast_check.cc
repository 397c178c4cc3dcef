// dyncast_check.cc: every kind of dynamic_cast the Itanium ABI routes through
// __dynamic_cast, repeated over many objects and two threads, folded into one
// checksum of the results (each as its displacement from the source, or
// "null"). Run it without and with the memo preloaded: the two checksums must
// be equal. With the memo preloaded it also prints the memo's counters
// (through ovtrace_memo_counters) and fails when a verified hit disagreed
// with libstdc++ or when no call reached the memo.
//
//   dyncast_check                                  # checksum only
//   OVTRACE_MEMO_VERIFY=1 LD_PRELOAD=./libdyncast_memo.so dyncast_check

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

#include <thread>
#include <typeinfo>
#include <vector>

namespace {

struct A {
    virtual ~A() = default;
    int a = 1;
};
struct B : A {
    int b = 2;
};
struct C : B {
    int c = 3;
};
struct X {
    virtual ~X() = default;
    int x = 4;
};
struct M : A, X {  // multiple inheritance: X is not at offset 0
    int m = 5;
};
struct V {
    virtual ~V() = default;
    int v = 6;
};
struct L;
void seen_during_construction(L* l);
struct L : virtual V {
    L() { seen_during_construction(this); }  // casts while the object is built
    int l = 7;
};
struct R : virtual V {
    int r = 8;
};
struct D : L, R {  // diamond through a virtual base
    int d = 9;
};
struct A2 : A {
    int a2 = 10;
};
struct Amb : B, A2 {  // two A subobjects: a cast to A* from X-less paths is ambiguous
    int amb = 11;
};
struct P : private A, public X {  // A is not a public base
    int p = 12;
};
struct Unrelated {
    virtual ~Unrelated() = default;
};

uint64_t fold(uint64_t h, const void* src, const void* dst) {
    int64_t v = dst == nullptr ? INT64_MIN : static_cast<const char*>(dst) - static_cast<const char*>(src);
    h ^= uint64_t(v);
    return h * 0x100000001B3ull;
}

thread_local uint64_t construction_hash = 0xCBF29CE484222325ull;

void seen_during_construction(L* l) {
    V* v = l;
    construction_hash = fold(construction_hash, v, dynamic_cast<L*>(v));
    construction_hash = fold(construction_hash, v, dynamic_cast<D*>(v));  // null while L is built
    construction_hash = fold(construction_hash, v, dynamic_cast<R*>(v));
}

struct Objects {
    std::vector<A*> as;
    std::vector<X*> xs;
    std::vector<V*> vs;
    std::vector<Unrelated*> us;
};

Objects make(int n) {
    Objects o;
    for (int i = 0; i < n; i++) {
        switch (i % 6) {
        case 0: o.as.push_back(new A); break;
        case 1: o.as.push_back(new B); break;
        case 2: o.as.push_back(new C); break;
        case 3: {
            M* m = new M;
            o.as.push_back(m);
            o.xs.push_back(m);
            break;
        }
        case 4: {
            D* d = new D;
            o.vs.push_back(static_cast<L*>(d));
            break;
        }
        case 5: {
            Amb* a = new Amb;
            o.as.push_back(static_cast<B*>(a));
            o.as.push_back(static_cast<A2*>(a));
            o.xs.push_back(new P);
            o.us.push_back(new Unrelated);
            break;
        }
        }
    }
    return o;
}

uint64_t run(const Objects& o, int rounds) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (int r = 0; r < rounds; r++) {
        for (A* a : o.as) {
            h = fold(h, a, dynamic_cast<B*>(a));
            h = fold(h, a, dynamic_cast<C*>(a));
            h = fold(h, a, dynamic_cast<M*>(a));
            h = fold(h, a, dynamic_cast<X*>(a));  // cross cast
            h = fold(h, a, dynamic_cast<A2*>(a));
            h = fold(h, a, dynamic_cast<Amb*>(a));
            h = fold(h, a, dynamic_cast<Unrelated*>(a));
        }
        for (X* x : o.xs) {
            h = fold(h, x, dynamic_cast<A*>(x));  // M: cross cast; P: private base, null
            h = fold(h, x, dynamic_cast<M*>(x));
            h = fold(h, x, dynamic_cast<P*>(x));
        }
        for (V* v : o.vs) {
            h = fold(h, v, dynamic_cast<L*>(v));
            h = fold(h, v, dynamic_cast<R*>(v));
            h = fold(h, v, dynamic_cast<D*>(v));
            h = fold(h, v, dynamic_cast<A*>(v));
        }
        for (Unrelated* u : o.us) {
            h = fold(h, u, dynamic_cast<A*>(u));
        }
        A* none = nullptr;
        h = fold(h, none, dynamic_cast<B*>(none));
        try {
            A& ref = *o.as[0];  // a plain A: the reference cast throws
            (void)dynamic_cast<B&>(ref);
            h = fold(h, nullptr, &ref);
        } catch (const std::bad_cast&) {
            h = fold(h, nullptr, nullptr);
        }
    }
    return h ^ construction_hash;
}

}  // namespace

int main() {
    Objects o1 = make(600), o2 = make(600);
    uint64_t h1 = 0, h2 = 0;
    std::thread t([&] { h2 = run(o2, 50); });
    h1 = run(o1, 50);
    t.join();
    printf("checksum %016llx %016llx\n", (unsigned long long)h1, (unsigned long long)h2);

    using CountersFn = int (*)(uint64_t*, int);
    auto counters = reinterpret_cast<CountersFn>(dlsym(RTLD_DEFAULT, "ovtrace_memo_counters"));
    if (counters == nullptr) {
        printf("memo not loaded\n");
        return 0;
    }
    uint64_t c[6] = {};
    counters(c, 6);
    printf("memo calls %llu hits %llu misses %llu evictions %llu verified %llu mismatches %llu\n",
           (unsigned long long)c[0], (unsigned long long)c[1], (unsigned long long)c[2], (unsigned long long)c[3],
           (unsigned long long)c[4], (unsigned long long)c[5]);
    if (c[0] == 0 || c[1] == 0 || c[5] != 0 || c[0] != c[1] + c[2]) {
        fprintf(stderr, "dyncast_check: the memo did not answer, or answered differently from libstdc++\n");
        return 1;
    }
    return 0;
}
