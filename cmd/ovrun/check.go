package main

import (
	"fmt"
	goruntime "runtime"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/model"
	"github.com/ovtoolkit/ovrun/runtime"
)

// Checks of flags that run before any work: a bad value or output path is
// a one-line error up front, never a failure after a long run.

// checkOutputs checks the output paths of the given flags that are set.
func checkOutputs(c *cli.Context, flags ...*cli.StringFlag) error {
	for _, f := range flags {
		if p := f.Get(c); p != "" {
			if err := safefile.Check(p); err != nil {
				return fmt.Errorf("--%s: %w", f.Name, err)
			}
		}
	}
	return nil
}

// checkCompileFlags checks the flags every compiling command shares.
func checkCompileFlags(c *cli.Context) error {
	if _, err := ovOptions(c); err != nil {
		return err
	}
	return cliutil.CheckInt(threadsFlag.Name, threadsFlag.Get(c), 0, goruntime.NumCPU())
}

// promptLen is the prompt length --prompt-ids or --prompt-tokens asks for
// (0 when neither is given; prompt reports that later).
func promptLen(c *cli.Context) (int, error) {
	n := promptTokensFlag.Get(c)
	if ids := promptIDsFlag.Get(c); ids != "" {
		if n > 0 {
			return 0, fmt.Errorf("give --prompt-ids or --prompt-tokens, not both")
		}
		n = strings.Count(ids, ",") + 1
	}
	if n < 0 || n > runtime.MaxCapacity {
		return 0, fmt.Errorf("--%s %d: want 1..%d", promptTokensFlag.Name, n, runtime.MaxCapacity)
	}
	return n, nil
}

// modelConfig reads --model's config.json or GGUF header (cheap) so that sizes can be
// checked before OpenVINO or the weights are loaded.
func modelConfig(c *cli.Context) (*model.Config, error) {
	return model.LoadConfig(modelFlag.Get(c))
}
