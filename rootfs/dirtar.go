package rootfs

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// A plain rootfs directory is imported by streaming it as a tar into the same
// unpacker that layers go through. That copies it with `cp -a` semantics
// (modes, owners, times, symlinks, hard links, devices, fifos, xattrs) while
// applying the same checks and size limit, and the tar's digest gives the
// layer a content address: importing the same tree twice stores it once.

// dirStream returns the directory as a deterministic tar stream (sorted walk,
// no user/group names, no atime/ctime). Close stops the walk and waits for it.
func dirStream(dir string) io.ReadCloser {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(writeDirTar(pw, dir))
	}()
	return &dirStreamReader{PipeReader: pr, done: done}
}

type dirStreamReader struct {
	*io.PipeReader
	done chan struct{}
}

func (r *dirStreamReader) Close() error {
	r.PipeReader.CloseWithError(errors.New("import stopped"))
	<-r.done
	return nil
}

func writeDirTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	var rootDev uint64
	links := map[[2]uint64]string{}
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		name := filepath.ToSlash(rel)
		hdr := &tar.Header{
			Name:    name,
			Mode:    int64(st.Mode & 0o7777),
			Uid:     int(st.Uid),
			Gid:     int(st.Gid),
			ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
			Format:  tar.FormatPAX, // keeps sub-second mtimes and xattrs
		}
		skipDir := false
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
			if rel == "." {
				rootDev = st.Dev
				hdr.Name = "./"
			} else if st.Dev != rootDev {
				// Stay on one filesystem, like `cp -ax`: a rootfs with
				// /proc or a bind mount still attached must not pull
				// the host in. The mount point itself is kept, empty.
				skipDir = true
			}
		case unix.S_IFREG:
			hdr.Typeflag = tar.TypeReg
			hdr.Size = st.Size
			if st.Nlink > 1 {
				key := [2]uint64{st.Dev, st.Ino}
				if first, ok := links[key]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				} else {
					links[key] = name
				}
			}
		case unix.S_IFLNK:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case unix.S_IFCHR, unix.S_IFBLK:
			hdr.Typeflag = tar.TypeChar
			if st.Mode&unix.S_IFMT == unix.S_IFBLK {
				hdr.Typeflag = tar.TypeBlock
			}
			hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		case unix.S_IFIFO:
			hdr.Typeflag = tar.TypeFifo
		default:
			return nil // sockets cannot be carried in a tar and are recreated by their owners
		}
		if err := addXattrs(p, hdr); err != nil {
			return err
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			// O_NONBLOCK: if the file was swapped for a fifo since the
			// Lstat, opening it must not hang the import.
			f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
			if err != nil {
				return err
			}
			var fst unix.Stat_t
			if err := unix.Fstat(int(f.Fd()), &fst); err != nil || fst.Ino != st.Ino || fst.Mode&unix.S_IFMT != unix.S_IFREG {
				f.Close()
				return fmt.Errorf("%s changed during the import", p)
			}
			_, err = io.CopyN(tw, f, hdr.Size)
			f.Close()
			if err != nil {
				return fmt.Errorf("copying %s (did it change during the import?): %w", p, err)
			}
		}
		if skipDir {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func addXattrs(p string, hdr *tar.Header) error {
	size, err := unix.Llistxattr(p, nil)
	if err != nil || size == 0 {
		return nil // no xattr support is the same as no xattrs
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(p, buf)
	if err != nil {
		return nil
	}
	for _, name := range splitNul(buf[:size]) {
		vsize, err := unix.Lgetxattr(p, name, nil)
		if err != nil {
			continue // e.g. trusted.* when not root
		}
		val := make([]byte, vsize)
		vsize, err = unix.Lgetxattr(p, name, val)
		if err != nil {
			continue
		}
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords[paxXattrPrefix+name] = string(val[:vsize])
	}
	return nil
}

func splitNul(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == 0 {
			if i > start {
				out = append(out, string(b[start:i]))
			}
			start = i + 1
		}
	}
	return out
}
