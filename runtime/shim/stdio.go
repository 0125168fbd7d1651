package shim

// Streams between a client and a process the shim holds (an exec'd
// process, or an attach to a container) travel through named pipes in a
// directory the client makes, as containerd's shim takes its tasks' I/O:
// the client opens its ends, names them in the request, and the shim
// opens the others. containerd/fifo opens either end without waiting for
// the other and connects them when both are there.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/fifo"

	"github.com/podlab/podlab/internal/errdefs"
)

// StreamPaths names the FIFOs of one process's streams; "" is a stream
// not asked for.
type StreamPaths struct {
	Stdin  string `json:"stdin,omitempty"`
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
}

// fifoOpenTimeout bounds the shim's wait for a client's end of a FIFO.
const fifoOpenTimeout = 10 * time.Second

// Streams are a client's ends of the FIFOs in Paths: it writes In and
// reads Out and Err (nil for a stream not asked for).
type Streams struct {
	Paths StreamPaths
	In    io.WriteCloser
	Out   io.ReadCloser
	Err   io.ReadCloser
	dir   string
}

// NewStreams makes dir (which must not exist) with a FIFO for each stream
// asked for, and opens the client's ends without waiting for the shim.
// Close closes them and removes dir.
func NewStreams(ctx context.Context, dir string, stdin, stdout, stderr bool) (_ *Streams, retErr error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	s := &Streams{dir: dir}
	defer func() {
		if retErr != nil {
			s.Close()
		}
	}()
	open := func(name string, flag int) (io.ReadWriteCloser, string, error) {
		path := filepath.Join(dir, name)
		f, err := fifo.OpenFifo(ctx, path, flag|syscall.O_CREAT|syscall.O_NONBLOCK, 0o600)
		if err != nil {
			return nil, "", fmt.Errorf("opening %s: %w", path, err)
		}
		return f, path, nil
	}
	if stdin {
		f, path, err := open("stdin", syscall.O_WRONLY)
		if err != nil {
			return nil, err
		}
		s.In, s.Paths.Stdin = f, path
	}
	if stdout {
		f, path, err := open("stdout", syscall.O_RDONLY)
		if err != nil {
			return nil, err
		}
		s.Out, s.Paths.Stdout = f, path
	}
	if stderr {
		f, path, err := open("stderr", syscall.O_RDONLY)
		if err != nil {
			return nil, err
		}
		s.Err, s.Paths.Stderr = f, path
	}
	return s, nil
}

// Close closes the client's ends and removes the FIFOs.
func (s *Streams) Close() error {
	for _, c := range []io.Closer{s.In, s.Out, s.Err} {
		if c != nil {
			c.Close()
		}
	}
	return os.RemoveAll(s.dir)
}

// shimStreams are the shim's ends of a client's FIFOs.
type shimStreams struct {
	in       io.ReadCloser
	out, err io.WriteCloser
}

// openStreams opens the shim's ends of the FIFOs in p.
func openStreams(p StreamPaths) (_ shimStreams, retErr error) {
	ctx, cancel := context.WithTimeout(context.Background(), fifoOpenTimeout)
	defer cancel()
	var s shimStreams
	defer func() {
		if retErr != nil {
			s.close()
		}
	}()
	open := func(path string, flag int) (io.ReadWriteCloser, error) {
		if !filepath.IsAbs(path) {
			return nil, kinded(errdefs.ErrInvalidArgument, "stream %q: not an absolute path", path)
		}
		f, err := fifo.OpenFifo(ctx, path, flag, 0)
		if err != nil {
			return nil, fmt.Errorf("opening stream %s: %w", path, err)
		}
		return f, nil
	}
	if p.Stdin != "" {
		f, err := open(p.Stdin, syscall.O_RDONLY)
		if err != nil {
			return s, err
		}
		s.in = f
	}
	if p.Stdout != "" {
		f, err := open(p.Stdout, syscall.O_WRONLY)
		if err != nil {
			return s, err
		}
		s.out = f
	}
	if p.Stderr != "" {
		f, err := open(p.Stderr, syscall.O_WRONLY)
		if err != nil {
			return s, err
		}
		s.err = f
	}
	return s, nil
}

func (s shimStreams) close() {
	for _, c := range []io.Closer{s.in, s.out, s.err} {
		if c != nil {
			c.Close()
		}
	}
}

// fanout copies a container's output stream to the clients attached to
// it. A client whose end fails (it went away) is dropped; the container
// never waits on one that is gone.
type fanout struct {
	mu     sync.Mutex
	ws     map[io.WriteCloser]struct{}
	closed bool // the stream ended: nothing more comes
}

func (f *fanout) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.ws {
		if _, err := w.Write(p); err != nil {
			w.Close()
			delete(f.ws, w)
		}
	}
	return len(p), nil
}

// add attaches w; false if the stream has ended already.
func (f *fanout) add(w io.WriteCloser) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	if f.ws == nil {
		f.ws = map[io.WriteCloser]struct{}{}
	}
	f.ws[w] = struct{}{}
	return true
}

// remove detaches w and closes it, if it is still attached.
func (f *fanout) remove(w io.WriteCloser) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.ws[w]; ok {
		w.Close()
		delete(f.ws, w)
	}
}

// close ends the stream: every attached client sees its end.
func (f *fanout) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for w := range f.ws {
		w.Close()
	}
	f.ws = nil
}

// copyOutput copies r to w until r ends, then closes w. A pty's master
// reads EIO once the last process holding its slave has exited: that is
// its end, not an error.
func copyOutput(w io.WriteCloser, r io.Reader) {
	_, err := io.Copy(w, r)
	if err != nil && !errors.Is(err, syscall.EIO) && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, os.ErrClosed) {
		fmt.Fprintf(os.Stderr, "podlab-shim: copying output: %v\n", err)
	}
	w.Close()
}
