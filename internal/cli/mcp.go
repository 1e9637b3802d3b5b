package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/mcpserver"
	cove "github.com/cove-dev/cove/sdk/go"
)

// mcpVersion is what `cove mcp` tells clients it is.
const mcpVersion = "1"

func (a *app) mcpCmd() *cobra.Command {
	var addr string
	c := &cobra.Command{
		Use:   "mcp",
		Short: "Serve cove's sandboxes as Model Context Protocol tools (stdio, or --http)",
		Long: `Serve cove's sandboxes to an MCP client as tools: create_sandbox,
list_sandboxes, run_command, command_output, send_input, read_file,
write_file, edit_file, list_files, sandbox_network, sleep_sandbox,
wake_sandbox and terminate_sandbox; a sandbox's files are resources too.

By default it speaks over stdin and stdout with the API key and URL the CLI
uses (COVE_API_KEY, COVE_URL, the config file). With --http ADDR it serves
streamable HTTP instead; every request must then carry a cove API key as
"Authorization: Bearer KEY", and the tools act with that key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr != "" {
				return a.serveMCPHTTP(cmd.Context(), addr)
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			s := mcpserver.New(cl, mcpVersion)
			t := &mcp.IOTransport{Reader: io.NopCloser(a.env.Stdin), Writer: nopWriteCloser{a.env.Stdout}}
			err = s.Run(cmd.Context(), t)
			if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
				return nil
			}
			return err
		},
	}
	c.Flags().StringVar(&addr, "http", "", "serve streamable HTTP on this address (e.g. 127.0.0.1:7071) instead of stdio")
	return c
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// serveMCPHTTP serves MCP over streamable HTTP on addr until ctx ends. It
// is stateless: each request names its key and gets a server acting with
// it, so one listener serves many teams and holds no one's key.
func (a *app) serveMCPHTTP(ctx context.Context, addr string) error {
	base, err := a.serverURL()
	if err != nil {
		return err
	}
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		key, _ := bearer(r)
		return mcpserver.New(cove.New(base, key), mcpVersion)
	}, &mcp.StreamableHTTPOptions{Stateless: true, CrossOriginProtection: http.NewCrossOriginProtection()})
	auth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := bearer(r); !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cove"`)
			http.Error(w, "send your cove API key as Authorization: Bearer KEY", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.env.Stderr, "cove mcp: serving streamable HTTP on http://%s (cove at %s)\n", ln.Addr(), base)
	srv := &http.Server{Handler: auth, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-done
		return nil
	}
}

func bearer(r *http.Request) (string, bool) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	key = strings.TrimSpace(key)
	return key, ok && key != ""
}
