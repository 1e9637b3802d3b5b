package guest

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// Bounds of one owner lookup: it reads /proc, whose size the sandbox
// decides.
const (
	maxOwnerProcs    = 1 << 14 // processes whose descriptors are read
	maxOwnerFDs      = 1 << 17 // descriptors read over all of them
	maxOwnerAncestry = 64      // parents walked up from a socket's holder
)

// sockKey is a socket as /proc/net/{tcp,udp}{,6} shows it.
type sockKey struct {
	proto         string
	local, remote netip.AddrPort
}

// owners answers POST /v1/sockets/owners: which command holds each socket.
// One lookup runs at a time; the host sends them in batches.
func (s *Server) owners(w http.ResponseWriter, r *http.Request) error {
	var req wire.OwnersRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if len(req.Sockets) > wire.MaxOwnerSockets {
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "%d sockets; at most %d per request", len(req.Sockets), wire.MaxOwnerSockets)
	}
	keys := make([]sockKey, len(req.Sockets))
	for i, sk := range req.Sockets {
		local, err1 := netip.ParseAddrPort(sk.Local)
		var remote netip.AddrPort
		var err2 error
		if sk.Remote != "" {
			remote, err2 = netip.ParseAddrPort(sk.Remote)
		}
		if (sk.Proto != "tcp" && sk.Proto != "udp") || err1 != nil || err2 != nil {
			return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "socket %d: want proto tcp or udp, local as ip:port and remote as ip:port or empty", i)
		}
		keys[i] = sockKey{sk.Proto, unmapAP(local), unmapAP(remote)}
	}
	s.ownersMu.Lock()
	ids, err := s.socketOwners(keys)
	s.ownersMu.Unlock()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.OwnersAnswer{Commands: ids})
	return nil
}

func unmapAP(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// socketOwners finds, for each socket, the command whose process holds it:
// the socket's inode from /proc/net, the process from the descriptors in
// /proc/PID/fd, and the command from the process's group, session or
// parents. "" where any step finds nothing.
func (s *Server) socketOwners(keys []sockKey) ([]string, error) {
	ids := make([]string, len(keys))
	inodes, err := socketInodes(keys)
	if err != nil {
		return nil, err
	}
	want := map[uint64]bool{}
	for _, ino := range inodes {
		if ino != 0 {
			want[ino] = true
		}
	}
	if len(want) == 0 {
		return ids, nil
	}
	holders, err := inodeHolders(want)
	if err != nil {
		return nil, err
	}
	cmds := s.commandsByPID()
	for i, ino := range inodes {
		if pid, ok := holders[ino]; ok {
			ids[i] = commandOf(pid, cmds)
		}
	}
	return ids, nil
}

// maxEnded bounds the forgotten commands remembered for owner lookups.
const maxEnded = 4096

// endedCommand is a command the host let the agent forget (it ended and
// its output was taken), remembered while its process group has members:
// a process it left behind still counts as its own.
type endedCommand struct {
	id  string
	seq int64
}

// rememberEndedLocked remembers a forgotten command while its process
// group lives, and forgets those whose groups are empty (their pids may
// be reused from then on). s.mu is held.
func (s *Server) rememberEndedLocked(c *command) {
	for pid := range s.ended {
		if unix.Kill(-pid, 0) == unix.ESRCH {
			delete(s.ended, pid)
		}
	}
	if unix.Kill(-c.pid, 0) == unix.ESRCH || len(s.ended) >= maxEnded {
		return
	}
	s.ended[c.pid] = endedCommand{id: c.id, seq: c.seq}
}

// cmdRef is a command as an owner lookup sees it.
type cmdRef struct {
	id      string
	seq     int64
	running bool // its main process is not reaped yet
}

// commandsByPID maps each command's main pid (its process group, and its
// session with a PTY) to the command, forgotten ones whose group lives
// included; the newest wins when a pid was used twice.
func (s *Server) commandsByPID() map[int]cmdRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]cmdRef, len(s.cmds)+len(s.ended))
	for pid, e := range s.ended {
		out[pid] = cmdRef{id: e.id, seq: e.seq}
	}
	for _, c := range s.cmds {
		if old, ok := out[c.pid]; !ok || old.seq < c.seq {
			out[c.pid] = cmdRef{id: c.id, seq: c.seq, running: !c.hasExited()}
		}
	}
	return out
}

// commandOf names the command pid belongs to: walking up from pid through
// its parents, the first process that is a command's running main process,
// or whose process group or session a command leads. A group or session of
// a command whose main process was reaped counts while its pid is not
// taken by a live process: the kernel does not reuse the pid of a group or
// session that still has members, so the group is the command's.
func commandOf(pid int, cmds map[int]cmdRef) string {
	leads := func(id int) string {
		c, ok := cmds[id]
		if !ok {
			return ""
		}
		if c.running {
			return c.id
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(id)); err == nil {
			return "" // the pid belongs to another process now
		}
		return c.id
	}
	for range maxOwnerAncestry {
		if pid <= 1 {
			return ""
		}
		st, err := readProcStat(pid)
		if err != nil {
			return ""
		}
		if c, ok := cmds[pid]; ok && c.running {
			return c.id
		}
		if id := leads(st.pgrp); id != "" {
			return id
		}
		if id := leads(st.session); id != "" {
			return id
		}
		pid = st.ppid
	}
	return ""
}

// procIDs are the fields of /proc/PID/stat commandOf needs.
type procIDs struct{ ppid, pgrp, session int }

func readProcStat(pid int) (procIDs, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procIDs{}, err
	}
	return parseProcStat(string(b))
}

// parseProcStat reads "pid (comm) state ppid pgrp session …"; comm is any
// 16 bytes the process chose, parentheses included, so fields start after
// the last ')'.
func parseProcStat(s string) (procIDs, error) {
	j := strings.LastIndexByte(s, ')')
	if j < 0 {
		return procIDs{}, errors.New("bad stat")
	}
	f := strings.Fields(s[j+1:])
	if len(f) < 4 {
		return procIDs{}, errors.New("bad stat")
	}
	var ids procIDs
	var err1, err2, err3 error
	ids.ppid, err1 = strconv.Atoi(f[1])
	ids.pgrp, err2 = strconv.Atoi(f[2])
	ids.session, err3 = strconv.Atoi(f[3])
	if err := errors.Join(err1, err2, err3); err != nil {
		return procIDs{}, fmt.Errorf("bad stat: %w", err)
	}
	return ids, nil
}

// socketInodes finds each socket's inode (0 when it is not there, or no
// descriptor holds it any more): by sock_diag, trying the nameservers of
// /etc/resolv.conf for a socket whose remote address is not given, and in
// the tables of /proc/net for what sock_diag cannot tell.
func socketInodes(keys []sockKey) ([]uint64, error) {
	out := make([]uint64, len(keys))
	rest := make([]bool, len(keys)) // left to /proc/net
	d, err := openSockDiag()
	if err != nil {
		for i := range rest {
			rest[i] = true
		}
	} else {
		defer d.close()
		var ns []netip.Addr
		for i, k := range keys {
			remotes := []netip.AddrPort{k.remote}
			if !k.remote.IsValid() {
				if ns == nil {
					ns = nameservers()
				}
				remotes = remotes[:0]
				for _, a := range ns {
					remotes = append(remotes, netip.AddrPortFrom(a, 53))
				}
				rest[i] = true
			}
			for _, remote := range remotes {
				ino, err := d.inode(k.proto, k.local, remote)
				if err != nil {
					rest[i] = true // /proc/net may still tell
					break
				}
				if ino != 0 {
					out[i], rest[i] = ino, false
					break
				}
			}
		}
	}
	return out, procNetInodes(keys, rest, out)
}

// procNetInodes finds the inodes of keys[i] where rest[i] in the tables of
// /proc/net, into out.
func procNetInodes(keys []sockKey, rest []bool, out []uint64) error {
	for _, proto := range []string{"tcp", "udp"} {
		idx := map[netip.AddrPort][]int{} // local address → keys
		for i, k := range keys {
			if k.proto == proto && rest[i] {
				idx[k.local] = append(idx[k.local], i)
			}
		}
		if len(idx) == 0 {
			continue
		}
		for _, table := range []string{proto, proto + "6"} {
			f, err := os.Open("/proc/net/" + table)
			if errors.Is(err, fs.ErrNotExist) {
				continue // no IPv6
			}
			if err != nil {
				return fmt.Errorf("read /proc/net/%s: %w", table, err)
			}
			err = scanSockTable(f, func(e sockEntry) {
				for _, i := range idx[e.local] {
					if !keys[i].remote.IsValid() || e.remote == keys[i].remote || (proto == "udp" && !e.remote.IsValid()) {
						out[i] = e.inode
					}
				}
			})
			f.Close()
			if err != nil {
				return fmt.Errorf("read /proc/net/%s: %w", table, err)
			}
		}
	}
	return nil
}

// sockEntry is one line of a /proc/net table. An unconnected socket's
// remote is the zero AddrPort.
type sockEntry struct {
	local, remote netip.AddrPort
	inode         uint64
}

// scanSockTable calls fn for each socket of a /proc/net/{tcp,udp}{,6}
// table that a descriptor holds (inode not 0).
func scanSockTable(f *os.File, fn func(sockEntry)) error {
	sc := bufio.NewScanner(f)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		e, ok := parseSockLine(sc.Text())
		if ok && e.inode != 0 {
			fn(e)
		}
	}
	return sc.Err()
}

// parseSockLine reads "sl local rem st tx:rx tr:when retrnsmt uid timeout
// inode …" with addresses as hex words in host (little-endian) order.
func parseSockLine(line string) (sockEntry, bool) {
	f := strings.Fields(line)
	if len(f) < 10 {
		return sockEntry{}, false
	}
	local, ok1 := parseHexAddr(f[1])
	remote, ok2 := parseHexAddr(f[2])
	inode, err := strconv.ParseUint(f[9], 10, 64)
	if !ok1 || !ok2 || err != nil {
		return sockEntry{}, false
	}
	if remote.Addr().IsUnspecified() && remote.Port() == 0 {
		remote = netip.AddrPort{}
	}
	return sockEntry{local: local, remote: remote, inode: inode}, true
}

func parseHexAddr(s string) (netip.AddrPort, bool) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	b, err := hex.DecodeString(a)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return netip.AddrPort{}, false
	}
	// Each 32-bit word is in host order (x86 and arm64: little-endian).
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	addr, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), true
}

// inodeHolders finds a process holding each wanted socket inode by reading
// /proc/PID/fd. Reading another process's descriptors takes its user's
// rights (the sandbox's root lacks CAP_SYS_PTRACE), so the scan runs on an
// OS thread of its own that takes each process's uid and gid as its fsuid
// and fsgid, and ends with the scan. Processes whose descriptors cannot be
// read (not dumpable, set-id) are skipped.
func inodeHolders(want map[uint64]bool) (map[uint64]int, error) {
	type result struct {
		holders map[uint64]int
		err     error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread's rights change
		h, err := scanHolders(want)
		done <- result{h, err}
	}()
	r := <-done
	return r.holders, r.err
}

func scanHolders(want map[uint64]bool) (map[uint64]int, error) {
	dir, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	root := os.Geteuid() == 0
	self := os.Getpid()
	holders := map[uint64]int{}
	procs, fds := 0, 0
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == self {
			continue
		}
		if procs++; procs > maxOwnerProcs || fds > maxOwnerFDs {
			break
		}
		if root {
			var st unix.Stat_t
			if unix.Stat("/proc/"+name, &st) != nil {
				continue
			}
			// setfsuid and setfsgid do not fail; they answer the
			// previous value.
			unix.SetfsgidRetGid(int(st.Gid))
			unix.SetfsuidRetUid(int(st.Uid))
		}
		fdDir := "/proc/" + name + "/fd/"
		ents, err := readDirNames(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range ents {
			if fds++; fds > maxOwnerFDs {
				break
			}
			link, err := os.Readlink(fdDir + fd)
			if err != nil {
				continue
			}
			rest, ok := strings.CutPrefix(link, "socket:[")
			if !ok {
				continue
			}
			ino, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64)
			if err == nil && want[ino] {
				if _, seen := holders[ino]; !seen {
					holders[ino] = pid
				}
			}
		}
		if len(holders) == len(want) {
			break
		}
	}
	return holders, nil
}

func readDirNames(p string) ([]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
