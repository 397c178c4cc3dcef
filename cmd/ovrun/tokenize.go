package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ovtoolkit/ovrun/model"
)

var (
	tokModelFlag    = &cli.StringFlag{Name: "model", Usage: "a `.gguf` file, or a checkpoint DIR with tokenizer.json", Required: true, EnvVars: []string{"OVRUN_MODEL"}}
	decodeIDsFlag   = &cli.StringFlag{Name: "decode", Usage: "print the text of token `IDS` (comma-separated) instead of tokenizing"}
	addSpecialFlag  = &cli.BoolFlag{Name: "add-special", Usage: "add the BOS/EOS tokens the vocabulary asks for"}
	showTokensFlag  = &cli.BoolFlag{Name: "tokens", Usage: "print one token per line: id and its text"}
	tokenizeCommand = &cli.Command{
		Name:      "tokenize",
		Usage:     "turn text into the model's token ids, or ids back into text",
		ArgsUsage: "TEXT",
		Description: `Uses the model's own tokenizer (GGUF metadata, or tokenizer.json next to a
safetensors checkpoint) without loading OpenVINO or the weights' graphs:

   ovrun tokenize --model SmolLM2-135M-Instruct.Q4_1.gguf "Hello, world!"
   ovrun tokenize --model SmolLM2-135M-Instruct.Q4_1.gguf --decode 19556,28,905,17

Special-token strings in TEXT (<|im_start|>) map to their ids; no BOS/EOS is
added unless --add-special. Ids are printed comma-separated on one line.`,
		Flags:  []cli.Flag{tokModelFlag, decodeIDsFlag, addSpecialFlag, showTokensFlag},
		Action: tokenizeAction,
	}
)

func tokenizeAction(c *cli.Context) error {
	ck, err := model.Load(tokModelFlag.Get(c))
	if err != nil {
		return err
	}
	defer ck.Close()
	tok, err := ck.Tokenizer()
	if err != nil {
		return err
	}
	w := c.App.Writer
	if s := decodeIDsFlag.Get(c); s != "" {
		if c.Args().Len() > 0 {
			return errors.New("give --decode IDS or TEXT, not both")
		}
		ids, err := parseIDs(decodeIDsFlag.Name, s, tok.VocabSize())
		if err != nil {
			return err
		}
		fmt.Fprintln(w, tok.Decode(ids))
		return nil
	}
	if c.Args().Len() != 1 {
		return errors.New("give the text to tokenize as one argument (quote it), or --decode IDS")
	}
	ids := tok.Encode(c.Args().First(), addSpecialFlag.Get(c))
	if showTokensFlag.Get(c) {
		for _, id := range ids {
			fmt.Fprintf(w, "%d\t%q\n", id, tok.Decode([]int64{id}))
		}
		return nil
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	fmt.Fprintln(w, strings.Join(parts, ","))
	return nil
}
