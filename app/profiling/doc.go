// Package profiling turns native profiles of OpenVINO compiles into pprof
// profiles (github.com/google/pprof/profile) and reads them back.
//
// Two sources are supported:
//
//   - perf (Debian's linux-perf) sampling the software clock
//     (`perf record -e cpu-clock`), read back with `perf script` and parsed
//     by ParsePerfScript: one pprof sample per perf sample, value = the
//     sample's period in nanoseconds, stack = perf's call chain;
//   - valgrind's callgrind tool, parsed by ParseCallgrind: exact instruction
//     counts per function and exact call counts per caller/callee edge,
//     expanded into stacks under the gprof assumption (see Callgraph.Profile).
//
// Record runs a command under either tool and writes the .pb.gz; Top and
// Diff summarise profiles for the terminal (ovtrace top and ovtrace diff).
// Functions are named as the tools print them (C++ names demangled);
// frames without a symbol are named after their shared object, e.g.
// "[libopenvino_intel_cpu_plugin.so]", so that unsymbolized time still adds
// up per library.
package profiling
