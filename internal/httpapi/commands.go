package httpapi

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	fastbase64 "github.com/segmentio/asm/base64"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/commands"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node"
)

// commandRoutes serve a sandbox's commands: runs, output, stdin,
// signals, the attach socket and the tickets that open it.
type commandRoutes struct {
	*shared
	Commands Commands
}

func (h commandRoutes) routes(auth authFunc, serve serveFunc) {
	auth("POST /v1/sandboxes/{ref}/commands", h.idempotent(h.createCommand))
	auth("GET /v1/sandboxes/{ref}/commands", h.listCommands)
	auth("GET /v1/sandboxes/{ref}/commands/{id}", h.getCommand)
	auth("GET /v1/sandboxes/{ref}/commands/{id}/output", h.commandOutput)
	auth("GET /v1/sandboxes/{ref}/commands/{id}/stdout", h.commandStream("stdout"))
	auth("GET /v1/sandboxes/{ref}/commands/{id}/stderr", h.commandStream("stderr"))
	auth("POST /v1/sandboxes/{ref}/commands/{id}/stdin", h.commandStdin)
	auth("POST /v1/sandboxes/{ref}/commands/{id}/signal", h.idempotent(h.commandSignal))
	serve("GET /v1/sandboxes/{ref}/commands/{id}/attach", h.authenticateTicket, h.attach)
	auth("POST /v1/tickets", refuseIdempotencyKey("a ticket", h.createTicket))
}

func (h commandRoutes) createCommand(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req api.CreateCommandRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	wait, err := queryBool(r, "wait")
	if err != nil {
		return err
	}
	wake, err := wakeQuery(r)
	if err != nil {
		return err
	}
	ref := r.PathValue("ref")
	c, err := h.Commands.Exec(r.Context(), p.Team.ID, ref, wake, req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/sandboxes/"+c.SandboxID+"/commands/"+c.ID)
	if !wait {
		return writeJSON(w, http.StatusCreated, c)
	}
	res, err := h.Commands.WaitCommand(r.Context(), p.Team.ID, c.SandboxID, c.ID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, res)
}

func (h commandRoutes) getCommand(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	c, err := h.Commands.GetCommand(r.Context(), p.Team.ID, r.PathValue("ref"), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, c)
}

func (h commandRoutes) listCommands(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	pg, err := paging(r)
	if err != nil {
		return err
	}
	q := commands.Query{Page: pg}
	for _, s := range csv(r, "state") {
		q.States = append(q.States, api.CommandState(s))
	}
	l, err := h.Commands.ListCommands(r.Context(), p.Team.ID, r.PathValue("ref"), q)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}

// exitRecord is the last line of an output stream.
type exitRecord struct {
	Seq      int64  `json:"seq"`
	Type     string `json:"type"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal"`
	TimedOut bool   `json:"timed_out"`
}

// commandOutput streams recorded output as NDJSON from after=SEQ; with
// follow it goes on until the command ends.
func (h commandRoutes) commandOutput(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	after, follow, err := outputQuery(r)
	if err != nil {
		return err
	}
	c, l, err := h.Commands.CommandOutput(r.Context(), p.Team.ID, r.PathValue("ref"), r.PathValue("id"))
	if err != nil {
		return err
	}
	defer l.Close()
	h.streamOutput(w, r, c.ID, l, after, follow)
	return nil
}

// outputQuery reads an output stream's after and follow.
func outputQuery(r *http.Request) (after int64, follow bool, err error) {
	if after, err = queryInt(r, "after", 0, 0, 1<<62); err != nil {
		return 0, false, err
	}
	follow, err = queryBool(r, "follow")
	return after, follow, err
}

// streamOutput writes a recorded output (a command's or a workload's) as
// NDJSON after seq after, then its exit record once it has one; with
// follow it waits for more until the end.
func (h *shared) streamOutput(w http.ResponseWriter, r *http.Request, what string, l node.Output, after int64, follow bool) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriterSize(w, 128<<10)
	flush := func() error {
		if err := bw.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	}
	// Flush when the log has nothing more right now, so a follower sees
	// output as it comes without a write per chunk under load.
	lastSeq := after
	var line []byte
	exit, err := l.Read(r.Context(), after, follow, func(ch node.Chunk) error {
		lastSeq = ch.Seq
		line = appendOutputRecord(line[:0], ch)
		if _, err := bw.Write(line); err != nil {
			return err
		}
		if l.LastSeq() == ch.Seq || bw.Buffered() > 96<<10 {
			return flush()
		}
		return nil
	})
	if err != nil {
		h.log.Debug("output stream ended", "output", what, "err", err)
		return // the status line is sent; the client sees the stream end
	}
	if exit != nil {
		seq := l.LastSeq()
		if seq <= lastSeq {
			seq = lastSeq + 1
		}
		if seq > after {
			b, _ := json.Marshal(exitRecord{Seq: seq, Type: "exit", ExitCode: exit.ExitCode, Signal: exit.Signal, TimedOut: exit.TimedOut})
			bw.Write(append(b, '\n'))
		}
	}
	flush()
}

// commandStream serves the recorded bytes of one stream, with Range.
func (h commandRoutes) commandStream(name string) func(http.ResponseWriter, *http.Request, lifecycle.Principal) error {
	return func(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
		_, l, err := h.Commands.CommandOutput(r.Context(), p.Team.ID, r.PathValue("ref"), r.PathValue("id"))
		if err != nil {
			return err
		}
		defer l.Close()
		return serveStream(w, r, l, name)
	}
}

// serveStream serves the raw bytes of one stream of a recorded output.
func serveStream(w http.ResponseWriter, r *http.Request, l node.Output, name string) error {
	ra, size, err := l.Stream(name)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", time.Time{}, io.NewSectionReader(ra, 0, size))
	return nil
}

func (h commandRoutes) commandStdin(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	eof, err := queryBool(r, "eof")
	if err != nil {
		return err
	}
	if err := h.Commands.Stdin(r.Context(), p.Team.ID, r.PathValue("ref"), r.PathValue("id"), r.Body, eof); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h commandRoutes) commandSignal(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req struct {
		Signal string `json:"signal"`
	}
	if err := decode(r, &req, false); err != nil {
		return err
	}
	if err := h.Commands.Signal(r.Context(), p.Team.ID, r.PathValue("ref"), r.PathValue("id"), req.Signal); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// appendOutputRecord appends one NDJSON line for a chunk. It writes what
// encoding/json would for api.OutputRecord, without reflection: this is the
// hot path of every output stream.
func appendOutputRecord(b []byte, ch node.Chunk) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, ch.Seq, 10)
	if ch.Truncated {
		return append(b, `,"type":"truncated"}`+"\n"...)
	}
	b = append(b, `,"stream":"`...)
	b = append(b, ch.Stream...)
	b = append(b, `","data":"`...)
	// The SIMD encoder: a stream of output is mostly this (the standard
	// library's is several times slower on amd64 and arm64).
	n, m := len(b), fastbase64.StdEncoding.EncodedLen(len(ch.Data))
	b = slices.Grow(b, m)[:n+m]
	fastbase64.StdEncoding.Encode(b[n:], ch.Data)
	return append(b, `"}`+"\n"...)
}
