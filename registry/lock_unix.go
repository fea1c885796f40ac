//go:build unix

package registry

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// lockFile takes an exclusive flock on path+".lock", creating it, and writes the
// process id into it so that a store that cannot take the lock can name the holder. It
// returns nil, and no error, when the lock file cannot be created because the directory
// takes no writes: then no store can write the document either, so none can lose
// another's writes.
func lockFile(path string) (*os.File, error) {
	name := path + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %s: locking it: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		holder := "another process"
		if b, rerr := os.ReadFile(name); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = "process " + strconv.Itoa(pid)
			}
		}
		f.Close()
		return nil, fmt.Errorf("registry: %s is in use by %s (it holds the lock on %s): two agents on one registry file would lose each other's changes; give each agent its own registry.file, or share one registry through Redis (redis.addrs)",
			path, holder, name)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("registry: %s: locking %s: %w", path, name, err)
	}
	// Best effort: the pid only names the holder in another store's error.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// unlockFile releases a lock taken by lockFile. The lock file stays: removing it while
// another store waits to open it would let two stores lock two different files.
func unlockFile(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
