package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/chat"
	"github.com/ovtoolkit/ovrun/engine"
	"github.com/ovtoolkit/ovrun/internal/cliutil"
	"github.com/ovtoolkit/ovrun/runtime"
	"github.com/ovtoolkit/ovrun/runtime/ovexec"
	"github.com/ovtoolkit/ovrun/tokenizer"
)

var (
	systemFlag     = &cli.StringFlag{Name: "system", Usage: "system message `TEXT` (default: the chat template's own, if any)"}
	chatLadderFlag = &cli.StringFlag{Name: "ladder", Value: "256,512,1024,2048", Usage: "ascending context `CAPACITIES`; the conversation grows through them"}
	chatMaxNewFlag = &cli.IntFlag{Name: "max-new-tokens", Value: 512, Usage: "`N` tokens per answer at most"}
	chatPolicyFlag = &cli.StringFlag{Name: "policy", Value: "grow-one-ahead", Usage: "ladder `POLICY`: " + strings.Join(runtime.PolicyNames(), ", "), Action: policyFlag.Action}
	chatStatsFlag  = &cli.BoolFlag{Name: "stats", Usage: "after each answer print the run table (rungs, compiles, tok/s) to standard error"}
	chatCommand    = &cli.Command{
		Name:  "chat",
		Usage: "chat with a model in its own chat template, on the ladder",
		Description: `Renders the conversation with the model's chat template (GGUF
tokenizer.chat_template, or tokenizer_config.json next to a safetensors
checkpoint; ChatML when the model has none), then decodes the answer on the
--ladder under --policy, growing the KV cache and compiling the next rung in
the background while the answer streams, and stops at the model's
end-of-generation token. The turns of a conversation share the ladder: a
rung is compiled once and kept.

With standard input not a terminal, reads one user message from it, prints
the assistant's answer and exits:

   echo "What is the capital of France?" | ovrun chat --model SmolLM2-135M-Instruct.Q4_1.gguf

On a terminal it is a conversation: each line is a message, an empty line or
Ctrl-D ends it. Greedy unless --temperature > 0.`,
		Flags: append(append(compileFlags(),
			systemFlag, chatLadderFlag, chatPolicyFlag, chatMaxNewFlag, seedFlag, prefillChunkFlag, prefillFlag,
			chatStatsFlag, jsonFlag, quietFlag,
		), samplingFlags...),
		Action: chatAction,
	}
)

// maxMessageBytes bounds one message read from standard input.
const maxMessageBytes = 1 << 20

func chatAction(c *cli.Context) error {
	ladder, policy, err := ladderAndPolicy(c, chatLadderFlag, chatPolicyFlag)
	if err != nil {
		return err
	}
	prefill, err := prefillMode(c)
	if err != nil {
		return err
	}
	if n := chatMaxNewFlag.Get(c); n < 1 {
		return fmt.Errorf("--max-new-tokens %d: want at least 1", n)
	}
	interactive := cliutil.IsTerminal(os.Stdin)
	ck, comp, err := openModel(c)
	if err != nil {
		return err
	}
	defer ck.Close()
	defer comp.Close()
	// One ladder for the whole conversation: later turns reuse its rungs.
	l, err := runtime.NewCompiledLadder(c.Context, comp, runtime.LadderConfig{Ladder: ladder, Policy: policy,
		Shape: comp.KVShape(), PrefillChunk: prefillChunk(c, comp), Prefill: prefill, KeepRungs: true,
		Background: runtime.BackgroundOptions{Nice: defaultCompileNice}})
	if err != nil {
		return err
	}
	defer l.Close()
	eng := engine.NewSequential(l, engine.SequentialConfig{})
	// The first rung compiles from now on, while the tokenizer and the
	// chat template are read and while the user types the first message
	// (the first turn waits for the same compile, not a second one). A
	// failed compile is the first turn's error.
	wctx, stopWarm := context.WithCancel(c.Context)
	warmed := make(chan struct{})
	go func() { defer close(warmed); eng.Warm(wctx) }()
	defer func() { stopWarm(); <-warmed }() // before the ladder closes
	tok, tmpl, err := textModel(c.Context, ck)
	if err != nil {
		return err
	}
	var msgs []chat.Message
	if s := systemFlag.Get(c); s != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: s})
	}
	in := bufio.NewReader(os.Stdin)
	for turn := 0; ; {
		var user string
		if interactive {
			fmt.Fprint(os.Stderr, "> ")
			line, err := in.ReadString('\n')
			user = strings.TrimSpace(line)
			if user == "" || (err != nil && !errors.Is(err, io.EOF)) {
				fmt.Fprintln(os.Stderr)
				return nil
			}
		} else {
			b, err := io.ReadAll(io.LimitReader(in, maxMessageBytes+1))
			if err != nil {
				return fmt.Errorf("read the message from standard input: %w", err)
			}
			if len(b) > maxMessageBytes {
				return fmt.Errorf("the message on standard input is longer than %d MiB", maxMessageBytes>>20)
			}
			if user = strings.TrimSpace(string(b)); user == "" {
				return errors.New("no message on standard input (pipe one in, or run on a terminal)")
			}
		}
		msgs = append(msgs, chat.Message{Role: "user", Content: user})
		start := processStart // the first turn's clock includes loading, as run's does
		if turn > 0 {
			start = time.Now() // later turns: from the message, not the user's typing
		}
		turn++
		answer, err := chatTurn(c, eng, comp, tok, tmpl, msgs, start)
		if err != nil || !interactive {
			return err
		}
		msgs = append(msgs, chat.Message{Role: "assistant", Content: answer})
	}
}

// chatTurn renders the conversation, decodes one answer on the engine
// while streaming it to standard output, and returns the answer's text.
func chatTurn(c *cli.Context, eng *engine.Sequential, comp *ovexec.Compiler, tok *tokenizer.Tokenizer, tmpl *chat.Template,
	msgs []chat.Message, start time.Time) (string, error) {
	// Text the user types that names a control token stays text, as in serve.
	ids, err := tmpl.PromptIDs(c.Context, tok, msgs, false)
	if err != nil {
		return "", err
	}
	in := promptInput{text: tok.Decode(ids), tok: tok, ids: ids}
	req, err := request(c, in, chatMaxNewFlag.Get(c))
	if err != nil {
		return "", err
	}
	stream := newTextStream(os.Stdout, tok)
	req.Emit = stream.emit
	if top := eng.MaxContext(); len(in.ids) >= top {
		return "", fmt.Errorf("the conversation is %d tokens, the largest rung holds %d: start a new one or give a longer --ladder", len(in.ids), top)
	}
	_, sum, runErr := eng.GenerateSummary(c.Context, req, start)
	if sum == nil { // refused before decoding
		return "", runErr
	}
	stream.flush()
	fmt.Println()
	describeRun(c, comp, sum)
	sum.Text = generatedText(tok, sum.Predictions)
	if chatStatsFlag.Get(c) && !quietFlag.Get(c) {
		printSummary(os.Stderr, sum)
	}
	var werr error
	if p := jsonFlag.Get(c); p != "" {
		werr = cliutil.WriteJSON(p, sum)
	}
	return sum.Text, errors.Join(runErr, werr)
}
