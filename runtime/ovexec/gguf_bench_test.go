package ovexec

import (
	"context"
	"fmt"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// BenchmarkGGUFRungs measures the memory of compiling several decode graphs
// (rungs) of the SmolLM2 GGUF in one process, each run once: resident MiB
// after the weights blob and after each graph, per weight format. Run one
// format per process, since RSS only grows:
//
//	go test ./runtime/ovexec -run '^$' -bench 'GGUFRungs/native' -benchtime 1x
//	go test ./runtime/ovexec -run '^$' -bench 'GGUFRungs/f32' -benchtime 1x
func BenchmarkGGUFRungs(b *testing.B) {
	path := testenv.SmolLM2(b)
	for _, format := range []model.WeightFormat{model.WeightsNative, model.WeightsF32} {
		b.Run(string(format), func(b *testing.B) {
			for b.Loop() {
				ck, err := model.Load(path)
				if err != nil {
					b.Fatal(err)
				}
				base := runtime.CurrentRSS()
				comp, err := NewCompiler(ck, Options{Device: "CPU", Precision: "f32", Weights: format})
				if err != nil {
					b.Fatal(err)
				}
				mib := func(n int64) float64 { return float64(n) / (1 << 20) }
				b.ReportMetric(mib(comp.Weights().TensorBytes()), "blob-MiB")
				b.ReportMetric(mib(runtime.CurrentRSS()-base), "rss-blob-MiB")
				buf, _, err := runtime.AllocFullView(comp.KVShape(), 1024) // one KV reservation: rungs bind prefix views
				if err != nil {
					b.Fatal(err)
				}
				var exes []runtime.Executable
				for _, c := range []int{256, 512, 1024} {
					exe, err := comp.Compile(context.Background(), model.GraphSpec{Capacity: c, Chunk: 1})
					if err != nil {
						b.Fatal(err)
					}
					kv, err := buf.View(c)
					if err != nil {
						b.Fatal(err)
					}
					if err := exe.Bind(kv); err != nil {
						b.Fatal(err)
					}
					if _, err := exe.Step([]int64{1}, 0); err != nil {
						b.Fatal(err)
					}
					exes = append(exes, exe)
					b.ReportMetric(mib(runtime.CurrentRSS()-base), fmt.Sprintf("rss-%d-graphs-MiB", len(exes)))
				}
				for _, e := range exes {
					e.Close()
				}
				buf.Free()
				comp.Close()
				ck.Close()
			}
		})
	}
}
