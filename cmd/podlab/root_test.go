package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// execute runs podlab with args on a fresh command tree (cobra keeps
// parsed flags in the commands) and returns its output and error.
func execute(args ...string) (string, error) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// everyCommand returns the commands of podlab's tree, the root first.
func everyCommand() []*cobra.Command {
	var all []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		all = append(all, c)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	return all
}

// TestUnknownSubcommandsFail walks the whole command tree: every command
// group, hidden or not, answers an unknown subcommand or a stray argument
// with "unknown command" and an error (main exits 1 on it), and run alone
// prints its help; every other command declares the arguments it takes,
// so that none accepts a stray one unseen.
func TestUnknownSubcommandsFail(t *testing.T) {
	groups := 0
	for _, c := range everyCommand() {
		path := strings.Fields(c.CommandPath())[1:]
		if !c.HasSubCommands() {
			if c.Args == nil {
				t.Errorf("%s: no Args: cobra accepts any argument", c.CommandPath())
			}
			continue
		}
		groups++
		for _, extra := range [][]string{{"nosuch"}, {"nosuch", "x"}, {"--", "nosuch"}} {
			args := append(append([]string{}, path...), extra...)
			want := fmt.Sprintf("unknown command %q for %q", "nosuch", c.CommandPath())
			out, err := execute(args...)
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("podlab %s: error %v, want %q (output %q)", strings.Join(args, " "), err, want, out)
			}
		}
		if out, err := execute(path...); err != nil || !strings.Contains(out, "Usage:") {
			t.Errorf("podlab %s: %v, want its help; got %q", strings.Join(path, " "), err, out)
		}
	}
	// podlab, image, completion at least: else the walk saw no tree.
	if groups < 3 {
		t.Errorf("%d command groups found, want at least 3", groups)
	}
}

func TestUnknownSubcommandSuggests(t *testing.T) {
	_, err := execute("image", "lss")
	if err == nil || !strings.Contains(err.Error(), "Did you mean this?\n\tls") {
		t.Errorf("podlab image lss: %v, want a suggestion of ls", err)
	}
}

func TestHelpTopics(t *testing.T) {
	for _, args := range [][]string{{"help", "nosuch"}, {"help", "image", "nosuch"}} {
		if _, err := execute(args...); err == nil || !strings.Contains(err.Error(), `unknown command "nosuch"`) {
			t.Errorf("podlab %s: %v, want unknown command", strings.Join(args, " "), err)
		}
	}
	for _, args := range [][]string{{"help"}, {"help", "image"}, {"help", "image", "import"}, {"help", "logs"}} {
		if out, err := execute(args...); err != nil || !strings.Contains(out, "Usage:") {
			t.Errorf("podlab %s: %v, want help; got %q", strings.Join(args, " "), err, out)
		}
	}
}
