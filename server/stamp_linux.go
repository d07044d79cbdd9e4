package server

import (
	"os"
	"syscall"
)

// statusChange is a file's inode and its status change time (ctime),
// which no write or time change leaves as they were.
type statusChange struct {
	ino       uint64
	sec, nsec int64
}

func statusOf(fi os.FileInfo) statusChange {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return statusChange{}
	}
	return statusChange{ino: st.Ino, sec: st.Ctim.Sec, nsec: st.Ctim.Nsec}
}
