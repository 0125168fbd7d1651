package runtime

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"time"
)

// LogLine is one record of a CRI-format log file.
type LogLine struct {
	Time    time.Time
	Stream  string
	Partial bool
	Content []byte
}

// ParseLogLine parses "<RFC3339Nano> <stream> <F|P> <content>".
func ParseLogLine(line []byte) (LogLine, error) {
	parts := bytes.SplitN(line, []byte{' '}, 4)
	if len(parts) < 3 {
		return LogLine{}, fmt.Errorf("malformed CRI log line %q", line)
	}
	t, err := time.Parse(time.RFC3339Nano, string(parts[0]))
	if err != nil {
		return LogLine{}, fmt.Errorf("malformed CRI log time %q: %w", parts[0], err)
	}
	l := LogLine{Time: t, Stream: string(parts[1]), Partial: string(parts[2]) == "P"}
	if len(parts) == 4 {
		l.Content = parts[3]
	}
	return l, nil
}

// CopyLogs writes the content of a CRI log to stdout/stderr by stream,
// joining partial records. With follow, it keeps reading until done returns true.
func CopyLogs(path string, stdout, stderr io.Writer, follow bool, done func() bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var pending []byte
	for {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			if !follow {
				return nil
			}
			if len(line) == 0 && done() {
				// One last read: the writer may have appended before exiting.
				if rest, _ := io.ReadAll(br); len(rest) == 0 {
					return nil
				} else {
					line = rest
				}
			} else {
				time.Sleep(100 * time.Millisecond)
				if len(line) > 0 {
					br = bufio.NewReader(io.MultiReader(bytes.NewReader(line), f))
				}
				continue
			}
		} else if err != nil {
			return err
		}
		l, err := ParseLogLine(bytes.TrimSuffix(line, []byte{'\n'}))
		if err != nil {
			return err
		}
		pending = append(pending, l.Content...)
		if l.Partial {
			continue
		}
		w := stdout
		if l.Stream == "stderr" {
			w = stderr
		}
		w.Write(append(pending, '\n'))
		pending = pending[:0]
	}
}
