// Package compilebench measures OpenVINO compiles the way ovtrace reports them:
// each compile in a fresh process, so that no cache, allocator state or
// loaded plugin of one measurement leaks into the next.
//
// MeasureCompile is the measurement itself (what `ovtrace compile-once`
// runs in the child process); Sweep repeats it over a capacity ladder into a
// compilecost.Profile (`ovtrace compile`); Run is a counterbalanced paired
// experiment between variants — OpenVINO properties, environment variables
// or another OpenVINO build (`ovtrace ab`). Sweep and Run take the function
// that runs one trial, so they are tested with fakes.
package compilebench
