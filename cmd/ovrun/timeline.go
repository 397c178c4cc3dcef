package main

import (
	"bytes"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/tracing"
)

var (
	traceFileFlag = &cli.StringFlag{Name: "trace", Usage: "OTLP JSON trace `FILE` written by ovrun run --trace-out", Required: true}
	svgOutFlag    = &cli.StringFlag{Name: "out", Usage: "write the SVG to `FILE`", Required: true}
	traceIDFlag   = &cli.StringFlag{Name: "trace-id", Usage: "the run to draw when the file holds several (`HEX`; default: the last)"}
	widthFlag     = &cli.IntFlag{Name: "width", Value: 1200, Usage: "picture width in `PIXELS`"}
)

var timelineCommand = &cli.Command{
	Name:  "timeline",
	Usage: "draw a run's trace (ovrun run --trace-out) as an SVG timeline",
	Description: `The picture has one time axis (seconds since the run started) and three lanes:
decode, coloured by rung and labelled with its capacity, with the prefill,
each KV migration and any boundary wait; compiles, foreground above and
background (behind decode) below, labelled with capacity and seconds; and
reserved KV against live KV as step lines. Dashed markers are the boundaries,
labelled with the wait. Hover a bar for all its attributes.

The trace is read a line at a time and only the spans drawn are kept: a
line longer than 16 MiB or more than 100000 spans and events to draw is a
"trace too large to plot" error (--trace-id draws one run of a file with
several). Ctrl-C stops it at once, writing nothing.`,
	Flags: []cli.Flag{
		traceFileFlag, svgOutFlag, traceIDFlag, widthFlag,
	},
	Action: timelineAction,
}

func timelineAction(c *cli.Context) error {
	if err := cliutil.CheckInt("width", widthFlag.Get(c), 400, 100000); err != nil {
		return err
	}
	if err := checkOutputs(c, svgOutFlag); err != nil {
		return err
	}
	// Read a line at a time, holding only what is drawn (bounded); Ctrl-C
	// stops the reading and the drawing between spans, writing nothing.
	spans, err := tracing.ReadTimeline(c.Context, traceFileFlag.Get(c), traceIDFlag.Get(c))
	if err != nil {
		return err
	}
	var b bytes.Buffer
	opt := tracing.TimelineOptions{Width: widthFlag.Get(c), TraceID: traceIDFlag.Get(c)}
	if err := tracing.WriteTimeline(c.Context, &b, spans, opt); err != nil {
		return fmt.Errorf("%s: %w", traceFileFlag.Get(c), err)
	}
	return safefile.WriteFile(svgOutFlag.Get(c), b.Bytes())
}
