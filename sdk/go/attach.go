package cove

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/coder/websocket"

	"github.com/cove-dev/cove/api"
)

// Attachment is a live connection to a command: Write sends input, Read
// returns output until the command ends.
type Attachment struct {
	conn *websocket.Conn
	// Exit is set once Read has reported done because the command ended.
	Exit *api.OutputRecord
}

// Attach connects to a command's terminal or pipes over a WebSocket,
// replaying its output after seq `after` first.
func (c *Client) Attach(ctx context.Context, ref, id string, after int64) (*Attachment, error) {
	u := c.base + commandPath(ref, id) + "/attach?after=" + strconv.FormatInt(after, 10)
	u = "ws" + strings.TrimPrefix(u, "http")
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient: c.http,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + c.key}, "User-Agent": {c.userAgent}},
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, decodeError(resp, "")
		}
		return nil, &Error{Code: api.CodeUnavailable, Message: "attach: " + err.Error(), Err: err}
	}
	conn.SetReadLimit(1 << 20)
	return &Attachment{conn: conn}, nil
}

// Write sends input to the command.
func (a *Attachment) Write(ctx context.Context, p []byte) error {
	return a.conn.Write(ctx, websocket.MessageBinary, p)
}

// Resize changes the command's terminal size.
func (a *Attachment) Resize(ctx context.Context, cols, rows int) error {
	b, _ := json.Marshal(map[string]api.PTY{"resize": {Cols: cols, Rows: rows}})
	return a.conn.Write(ctx, websocket.MessageText, b)
}

// Read returns the next piece of output. Once the command has ended and all
// its output was read, it returns done, with Exit set.
func (a *Attachment) Read(ctx context.Context) (data []byte, done bool, err error) {
	for {
		typ, b, err := a.conn.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				return nil, true, nil
			}
			return nil, false, err
		}
		if typ == websocket.MessageBinary {
			return b, false, nil
		}
		var m struct {
			Exit *struct {
				ExitCode int    `json:"exit_code"`
				Signal   string `json:"signal"`
				TimedOut bool   `json:"timed_out"`
			} `json:"exit"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, false, fmt.Errorf("attach: bad text frame: %w", err)
		}
		if m.Exit != nil {
			code := m.Exit.ExitCode
			a.Exit = &api.OutputRecord{Type: "exit", ExitCode: &code, Signal: m.Exit.Signal, TimedOut: m.Exit.TimedOut}
		}
	}
}

// Close detaches; the command keeps running.
func (a *Attachment) Close() error { return a.conn.Close(websocket.StatusNormalClosure, "detach") }
