package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/coder/websocket"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node"
)

// AttachMessage is a text frame of the attach WebSocket. The client sends
// Resize; the server sends Exit last, then closes.
type AttachMessage struct {
	Resize *api.PTY        `json:"resize,omitempty"`
	Exit   *exitAttachInfo `json:"exit,omitempty"`
}

type exitAttachInfo struct {
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal"`
	TimedOut bool   `json:"timed_out"`
}

// attach bridges a WebSocket to a running command: binary frames in are its
// stdin, its output (from after=SEQ, default the beginning) goes out as
// binary frames, text frames carry resizes in and the exit out. Closing the
// socket leaves the command running.
func (h commandRoutes) attach(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	after, err := queryInt(r, "after", 0, 0, 1<<62)
	if err != nil {
		return err
	}
	team, ref, id := p.Team.ID, r.PathValue("ref"), r.PathValue("id")
	c, l, err := h.Commands.CommandOutput(r.Context(), team, ref, id)
	if err != nil {
		return err
	}
	defer l.Close()
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil // Accept has answered
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	var wg sync.WaitGroup
	defer wg.Wait()
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	if !c.State.Done() && c.Stdin {
		wg.Go(func() {
			// Input streams into the command for as long as the socket is open.
			err := h.Commands.Stdin(ctx, team, ref, id, stdinR, false)
			stdinR.CloseWithError(err)
			if api.ErrorCode(err) == api.CodeUnavailable {
				// The agent stopped answering: say so now, as a 503 would,
				// rather than leave the client typing into nothing.
				conn.Close(websocket.StatusTryAgainLater, closeReason(err))
			}
		})
	}
	wg.Go(func() {
		defer cancel()
		for {
			typ, b, err := conn.Read(ctx)
			if err != nil {
				return
			}
			switch typ {
			case websocket.MessageBinary:
				if _, err := stdinW.Write(b); err != nil {
					conn.Close(websocket.StatusPolicyViolation, "the command takes no more input")
					return
				}
			case websocket.MessageText:
				var m AttachMessage
				if err := json.Unmarshal(b, &m); err != nil || m.Resize == nil {
					conn.Close(websocket.StatusUnsupportedData, `text frames must be {"resize":{"cols":N,"rows":N}}`)
					return
				}
				if err := h.Commands.Resize(ctx, team, ref, id, m.Resize.Cols, m.Resize.Rows); err != nil {
					h.log.Debug("attach resize", "command", id, "err", err)
				}
			}
		}
	})

	exit, err := l.Read(ctx, after, true, func(ch node.Chunk) error {
		if ch.Truncated {
			return nil
		}
		return conn.Write(ctx, websocket.MessageBinary, ch.Data)
	})
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			h.log.Debug("attach output", "command", id, "err", err)
		}
		return nil
	}
	if exit != nil {
		b, _ := json.Marshal(AttachMessage{Exit: &exitAttachInfo{ExitCode: exit.ExitCode, Signal: exit.Signal, TimedOut: exit.TimedOut}})
		conn.Write(ctx, websocket.MessageText, b)
	}
	conn.Close(websocket.StatusNormalClosure, "command ended")
	return nil
}

// closeReason is the message of err as a WebSocket close reason, which
// must fit in 123 bytes.
func closeReason(err error) string {
	msg := "unavailable"
	var e *api.Error
	if errors.As(err, &e) {
		msg = "unavailable: " + e.Message
	}
	if len(msg) > 123 {
		msg = msg[:120] + "..."
	}
	return msg
}
