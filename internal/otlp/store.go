package otlp

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// StoreDir is the span store's dir under podlab's state dir.
const StoreDir = "otlp"

// Limits bound the store: the kubelet alone exports a span for each CRI
// call it makes, its status polling included, for as long as it runs.
type Limits struct {
	// MaxBytes is the store's size; the oldest segments go first.
	MaxBytes int64
	// MaxAge is how long a segment is kept after its last span.
	MaxAge time.Duration
	// SegmentBytes is the size at which a segment is closed and a new
	// one begun: the unit of eviction.
	SegmentBytes int64
}

// DefaultLimits: 64 MiB, a day, 4 MiB segments.
var DefaultLimits = Limits{MaxBytes: 64 << 20, MaxAge: 24 * time.Hour, SegmentBytes: 4 << 20}

// Store keeps spans on disk in segments, spans-<unixnano>.jsonl (one Span
// a line), each with an index, spans-<unixnano>.idx: one line per span
// that names a pod (Keys), holding its trace id and keys. A query reads
// the indexes, then only the segments that hold the traces it wants.
//
// One process writes (podlab serve); any may read. A reader tolerates
// the half-written last line of the segment being written.
type Store struct {
	dir    string
	limits Limits

	mu      sync.Mutex
	seg     *os.File
	idx     *os.File
	segSize int64
}

// OpenStore opens (and makes, 0700) the store in dir for writing, and
// evicts what is over the limits.
func OpenStore(dir string, limits Limits) (*Store, error) {
	if limits.SegmentBytes <= 0 {
		limits.SegmentBytes = DefaultLimits.SegmentBytes
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("span store: %w", err)
	}
	s := &Store{dir: dir, limits: limits}
	if err := s.evict(time.Now()); err != nil {
		return nil, err
	}
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Add appends spans to the current segment, and its index.
func (s *Store) Add(spans []Span) error {
	if len(spans) == 0 {
		return nil
	}
	var data, index strings.Builder
	for _, sp := range spans {
		j, err := json.Marshal(sp)
		if err != nil {
			return err
		}
		data.Write(j)
		data.WriteByte('\n')
		if keys := Keys(sp); len(keys) > 0 {
			j, _ := json.Marshal(indexEntry{TraceID: sp.TraceID, Keys: keys})
			index.Write(j)
			index.WriteByte('\n')
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seg == nil || s.segSize >= s.limits.SegmentBytes {
		if err := s.rotate(); err != nil {
			return err
		}
	}
	// The index line is written after the span: a reader that finds a
	// trace in an index finds its span in the segment.
	n, err := s.seg.WriteString(data.String())
	s.segSize += int64(n)
	if err != nil {
		return fmt.Errorf("span store: %w", err)
	}
	if index.Len() > 0 {
		if _, err := s.idx.WriteString(index.String()); err != nil {
			return fmt.Errorf("span store: %w", err)
		}
	}
	return nil
}

// rotate closes the current segment, evicts, and begins the next.
func (s *Store) rotate() error {
	s.closeSegment()
	now := time.Now()
	if err := s.evict(now); err != nil {
		return err
	}
	base := filepath.Join(s.dir, fmt.Sprintf("spans-%020d", now.UnixNano()))
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL | os.O_APPEND | unix.O_NOFOLLOW
	seg, err := os.OpenFile(base+".jsonl", flags, 0o600)
	if err != nil {
		return fmt.Errorf("span store: %w", err)
	}
	idx, err := os.OpenFile(base+".idx", flags, 0o600)
	if err != nil {
		seg.Close()
		os.Remove(base + ".jsonl")
		return fmt.Errorf("span store: %w", err)
	}
	s.seg, s.idx, s.segSize = seg, idx, 0
	return nil
}

func (s *Store) closeSegment() {
	if s.seg != nil {
		s.seg.Close()
		s.idx.Close()
		s.seg, s.idx = nil, nil
	}
}

// Close closes the current segment.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeSegment()
	return nil
}

// evict removes the segments (not the one being written) older than
// MaxAge, then the oldest until the store fits MaxBytes.
func (s *Store) evict(now time.Time) error {
	segs, err := segments(s.dir)
	if err != nil {
		return err
	}
	var total int64
	type seg struct {
		base string
		size int64
		mod  time.Time
	}
	var all []seg
	for _, base := range segs {
		var size int64
		var mod time.Time
		for _, ext := range []string{".jsonl", ".idx"} {
			if fi, err := os.Lstat(base + ext); err == nil {
				size += fi.Size()
				if fi.ModTime().After(mod) {
					mod = fi.ModTime()
				}
			}
		}
		total += size
		all = append(all, seg{base, size, mod})
	}
	current := ""
	if s.seg != nil {
		current = strings.TrimSuffix(s.seg.Name(), ".jsonl")
	}
	for _, sg := range all {
		old := s.limits.MaxAge > 0 && now.Sub(sg.mod) > s.limits.MaxAge
		big := s.limits.MaxBytes > 0 && total > s.limits.MaxBytes
		if sg.base == current || !old && !big {
			continue
		}
		for _, ext := range []string{".jsonl", ".idx"} {
			if err := os.Remove(sg.base + ext); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("span store: evicting: %w", err)
			}
		}
		total -= sg.size
	}
	return nil
}

// segments are the segments' paths without extension, oldest first.
func segments(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("span store: %w", err)
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, "spans-") && strings.HasSuffix(n, ".jsonl") && e.Type().IsRegular() {
			out = append(out, filepath.Join(dir, strings.TrimSuffix(n, ".jsonl")))
		}
	}
	sort.Strings(out) // the names hold zero-padded creation times
	return out, nil
}

type indexEntry struct {
	TraceID string   `json:"t"`
	Keys    []string `json:"k"`
}

// Index is what a store's indexes say: for each segment, the traces of
// its spans that name pods, and their keys.
type Index struct {
	dir string
	// bySeg[i] are the entries of segs[i].
	segs  []string
	bySeg [][]indexEntry
}

// ReadIndex reads the indexes of the store in dir (none yet: empty).
func ReadIndex(dir string) (*Index, error) {
	segs, err := segments(dir)
	if err != nil {
		return nil, err
	}
	ix := &Index{dir: dir}
	for _, base := range segs {
		var ents []indexEntry
		err := readLines(base+".idx", func(line []byte) error {
			var e indexEntry
			if json.Unmarshal(line, &e) == nil {
				ents = append(ents, e)
			}
			return nil
		})
		if errors.Is(err, fs.ErrNotExist) {
			continue // evicted meanwhile
		}
		if err != nil {
			return nil, err
		}
		ix.segs = append(ix.segs, base)
		ix.bySeg = append(ix.bySeg, ents)
	}
	return ix, nil
}

// Traces are the trace ids having a span with one of keys, with the keys
// those spans name (all of them, not only the ones asked for).
func (ix *Index) Traces(keys map[string]bool) map[string][]string {
	out := map[string][]string{}
	for _, ents := range ix.bySeg {
		for _, e := range ents {
			for _, k := range e.Keys {
				if keys[k] {
					out[e.TraceID] = append(out[e.TraceID], e.Keys...)
					break
				}
			}
		}
	}
	return out
}

// TracesWithPrefix are the trace ids having a span with a key that
// starts with prefix, and those keys.
func (ix *Index) TracesWithPrefix(prefix string) map[string][]string {
	out := map[string][]string{}
	for _, ents := range ix.bySeg {
		for _, e := range ents {
			for _, k := range e.Keys {
				if strings.HasPrefix(k, prefix) {
					out[e.TraceID] = append(out[e.TraceID], k)
				}
			}
		}
	}
	return out
}

// Spans reads every span of the given traces. Spans of a trace may be in
// any segment (a trace's spans arrive in several exports), so each
// segment is scanned, but only its spans of those traces are decoded.
func (ix *Index) Spans(traces map[string]bool) ([]Span, error) {
	if len(traces) == 0 {
		return nil, nil
	}
	var out []Span
	for _, base := range ix.segs {
		err := readLines(base+".jsonl", func(line []byte) error {
			// The trace id leads each line: {"traceId":"<32 hex>",...
			const pre = `{"traceId":"`
			if len(line) < len(pre)+32 || !traces[string(line[len(pre):len(pre)+32])] {
				return nil
			}
			var s Span
			if json.Unmarshal(line, &s) == nil {
				out = append(out, s)
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return out, nil
}

func readLines(path string, fn func([]byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if err := fn(sc.Bytes()); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
