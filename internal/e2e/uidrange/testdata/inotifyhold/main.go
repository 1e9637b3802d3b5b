// inotifyhold opens an inotify instance with a watch, prints "ok" (or why
// it could not) and holds the instance until it is killed: a sandbox that
// runs it in the background keeps one instance open.
package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func main() {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		fmt.Println("inotify_init1:", err)
		os.Exit(1)
	}
	if _, err := unix.InotifyAddWatch(fd, "/", unix.IN_CREATE); err != nil {
		fmt.Println("inotify_add_watch:", err)
		os.Exit(1)
	}
	fmt.Println("ok")
	for {
		unix.Pause()
	}
}
