package mcpserver

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cove-dev/cove/api"
)

// fakeAPI is a small in-memory cove REST API: only the calls the MCP tools
// make, answered as the real API answers them (JSON bodies, the one error
// body, NDJSON output, ETag and Repr-Digest on downloads, If-Match on
// writes). fail makes a call, by route name, answer an API error.
type fakeAPI struct {
	mu        sync.Mutex
	sandboxes []api.Sandbox
	files     map[string]*fakeFile          // by absolute path (one sandbox's)
	scripts   map[string][]api.OutputRecord // a command line's output, exit last (or none: the stream ends)
	hang      map[string]bool               // command lines whose output stream stays open
	commands  map[string]string             // command ID → its command line
	policy    []string                      // the network policy's allow list
	observed  []api.NetworkObservation      // network observations
	fail      map[string]*api.Error         // route name → the error it answers
	badDigest bool                          // downloads announce a wrong digest
	calls     []string                      // route names, in order
	create    api.CreateSandboxRequest      // the last create's body
	createQ   string                        // the last create's query
	listQ     string                        // the last list's query
	exec      api.CreateCommandRequest      // the last exec's body
	outputQ   []string                      // each output call's query
	stdin     bytes.Buffer                  // what send_input sent
	stdinEOF  bool                          // send_input closed stdin
	update    *api.UpdateSandboxRequest     // the last update's body
	writeMode string                        // the last write's mode
	lsQ       string                        // the last list of files' query
	waits     []string                      // each wait's state
	headers   map[string]http.Header        // the last request's headers by route
	volumes   []api.Volume                  // the team's volumes
	volumeQ   string                        // the last list of volumes' query
}

type fakeFile struct {
	content []byte
	version int
}

func newFake() *fakeAPI {
	return &fakeAPI{
		sandboxes: []api.Sandbox{{ID: "sb1", Name: "box", State: api.StateRunning, Template: "base", Workdir: "/workspace",
			Resources: api.Resources{CPUs: 1, MemoryMiB: 1024, DiskMiB: 4096}}},
		files:    map[string]*fakeFile{"/workspace/a.txt": {content: []byte("hello\n"), version: 1}},
		scripts:  map[string][]api.OutputRecord{},
		hang:     map[string]bool{},
		commands: map[string]string{},
		fail:     map[string]*api.Error{},
		headers:  map[string]http.Header{},
	}
}

var statusOf = map[api.Code]int{
	api.CodeInvalidArgument: 400, api.CodeNotFound: 404, api.CodeConflict: 409,
	api.CodePreconditionFailed: 412, api.CodeResourceExhausted: 429, api.CodeUnprocessable: 422,
}

func writeErr(w http.ResponseWriter, e *api.Error) {
	status, ok := statusOf[e.Code]
	if !ok {
		status = 500
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(api.ErrorResponse{Error: e})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (f *fakeAPI) sandbox(ref string) (int, *api.Error) {
	for i, sb := range f.sandboxes {
		if sb.ID == ref || sb.Name == ref {
			return i, nil
		}
	}
	return -1, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("sandbox %s not found", ref)}
}

// volume answers the index of the volume with ID or name ref, or -1.
func (f *fakeAPI) volume(ref string) int {
	return slices.IndexFunc(f.volumes, func(v api.Volume) bool { return v.ID == ref || v.Name == ref })
}

func version(ff *fakeFile) string { return "v" + strconv.Itoa(ff.version) }

func (f *fakeAPI) entry(p string, ff *fakeFile) api.FileEntry {
	return api.FileEntry{Name: p[strings.LastIndexByte(p, '/')+1:], Path: p, Type: api.FileTypeFile, Size: int64(len(ff.content)), Mode: "0644", Version: version(ff)}
}

func (f *fakeAPI) handler() http.Handler {
	mux := http.NewServeMux()
	// route registers a call: it is counted, its key checked, and fail
	// answers for it; fn runs under f.mu.
	route := func(pattern, name string, fn func(w http.ResponseWriter, r *http.Request) *api.Error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer key" {
				writeErr(w, &api.Error{Code: api.CodeUnauthenticated, Message: "no key"})
				return
			}
			f.mu.Lock()
			f.calls = append(f.calls, name)
			f.headers[name] = r.Header.Clone()
			e := f.fail[name]
			if e == nil && r.PathValue("ref") != "" {
				_, e = f.sandbox(r.PathValue("ref"))
			}
			if e == nil {
				e = fn(w, r)
			}
			f.mu.Unlock()
			if e != nil {
				writeErr(w, e)
			}
		})
	}
	decode := func(r *http.Request, v any) *api.Error {
		if err := json.NewDecoder(r.Body).Decode(v); err != nil {
			return &api.Error{Code: api.CodeInvalidArgument, Message: "bad body: " + err.Error()}
		}
		return nil
	}
	route("POST /v1/sandboxes", "create", func(w http.ResponseWriter, r *http.Request) *api.Error {
		f.create = api.CreateSandboxRequest{}
		if e := decode(r, &f.create); e != nil {
			return e
		}
		f.createQ = r.URL.RawQuery
		sb := api.Sandbox{ID: "sb" + strconv.Itoa(len(f.sandboxes)+1), Name: f.create.Name, State: api.StateRunning,
			Template: "base", Workdir: "/workspace", Labels: f.create.Labels, Resources: api.Resources{CPUs: 1, MemoryMiB: 1024, DiskMiB: 4096}}
		if res := f.create.Resources; res != nil && res.CPUs != nil {
			sb.Resources.CPUs = *res.CPUs
		}
		for _, m := range f.create.Volumes {
			i := f.volume(m.Name)
			if i < 0 {
				return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("volume %s not found", m.Name)}
			}
			m.VolumeID = f.volumes[i].ID
			sb.Volumes = append(sb.Volumes, m)
			f.volumes[i].Sandboxes = append(f.volumes[i].Sandboxes, sb.ID)
		}
		f.sandboxes = append(f.sandboxes, sb)
		writeJSON(w, sb)
		return nil
	})
	route("POST /v1/volumes", "create_volume", func(w http.ResponseWriter, r *http.Request) *api.Error {
		var req api.CreateVolumeRequest
		if e := decode(r, &req); e != nil {
			return e
		}
		if f.volume(req.Name) >= 0 {
			return &api.Error{Code: api.CodeConflict, Message: fmt.Sprintf("a volume named %q already exists", req.Name)}
		}
		v := api.Volume{ID: "vol_" + strconv.Itoa(len(f.volumes)+1), TeamID: "team_1", Name: req.Name, SizeMiB: req.SizeMiB, Sandboxes: []string{}}
		f.volumes = append(f.volumes, v)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(v)
		return nil
	})
	route("GET /v1/volumes", "list_volumes", func(w http.ResponseWriter, r *http.Request) *api.Error {
		f.volumeQ = r.URL.RawQuery
		l := api.List[api.Volume]{Items: f.volumes}
		if n, _ := strconv.Atoi(r.URL.Query().Get("limit")); n > 0 && n < len(l.Items) {
			l.Items, l.NextCursor = l.Items[:n], l.Items[n-1].ID
		}
		writeJSON(w, l)
		return nil
	})
	route("DELETE /v1/volumes/{vol}", "delete_volume", func(w http.ResponseWriter, r *http.Request) *api.Error {
		i := f.volume(r.PathValue("vol"))
		if i < 0 {
			return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("volume %s not found", r.PathValue("vol"))}
		}
		if v := f.volumes[i]; len(v.Sandboxes) > 0 {
			return &api.Error{Code: api.CodeConflict, Message: fmt.Sprintf("volume %s is mounted by %s", v.ID, strings.Join(v.Sandboxes, ", ")),
				Details: map[string]any{"sandboxes": v.Sandboxes}}
		}
		f.volumes = slices.Delete(f.volumes, i, i+1)
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	route("GET /v1/sandboxes", "list", func(w http.ResponseWriter, r *http.Request) *api.Error {
		f.listQ = r.URL.RawQuery
		out := api.List[api.Sandbox]{Items: []api.Sandbox{}}
		for _, sb := range slices.Backward(f.sandboxes) {
			if st := r.URL.Query()["state"]; len(st) == 0 || slices.Contains(st, string(sb.State)) {
				out.Items = append(out.Items, sb)
			}
		}
		if n, _ := strconv.Atoi(r.URL.Query().Get("limit")); n > 0 && len(out.Items) > n {
			out.Items, out.NextCursor = out.Items[:n], "more"
		}
		writeJSON(w, out)
		return nil
	})
	route("GET /v1/sandboxes/{ref}", "get", func(w http.ResponseWriter, r *http.Request) *api.Error {
		i, _ := f.sandbox(r.PathValue("ref"))
		if st := r.URL.Query().Get("wait"); st != "" {
			f.waits = append(f.waits, st)
			if e := f.fail["wait"]; e != nil {
				return e
			}
		}
		writeJSON(w, f.sandboxes[i])
		return nil
	})
	route("DELETE /v1/sandboxes/{ref}", "terminate", func(w http.ResponseWriter, r *http.Request) *api.Error {
		i, _ := f.sandbox(r.PathValue("ref"))
		f.sandboxes[i].State = api.StateTerminated
		writeJSON(w, f.sandboxes[i])
		return nil
	})
	route("PATCH /v1/sandboxes/{ref}", "update", func(w http.ResponseWriter, r *http.Request) *api.Error {
		f.update = &api.UpdateSandboxRequest{}
		if e := decode(r, f.update); e != nil {
			return e
		}
		if f.update.Network != nil {
			f.policy = f.update.Network.Allow
		}
		i, _ := f.sandbox(r.PathValue("ref"))
		writeJSON(w, f.sandboxes[i])
		return nil
	})
	for _, s := range []struct {
		name string
		to   api.SandboxState
	}{{"sleep", api.StateAsleep}, {"wake", api.StateRunning}} {
		route("POST /v1/sandboxes/{ref}/"+s.name, s.name, func(w http.ResponseWriter, r *http.Request) *api.Error {
			i, _ := f.sandbox(r.PathValue("ref"))
			f.sandboxes[i].State = s.to
			writeJSON(w, f.sandboxes[i])
			return nil
		})
	}
	route("POST /v1/sandboxes/{ref}/snapshots", "snapshot", func(w http.ResponseWriter, r *http.Request) *api.Error {
		var req api.CreateSnapshotRequest
		if e := decode(r, &req); e != nil {
			return e
		}
		i, _ := f.sandbox(r.PathValue("ref"))
		writeJSON(w, api.Snapshot{ID: "snap_1", Name: req.Name, SandboxID: f.sandboxes[i].ID, SizeBytes: 42, Digest: "sha256:00"})
		return nil
	})
	route("POST /v1/sandboxes/{ref}/fork", "fork", func(w http.ResponseWriter, r *http.Request) *api.Error {
		var req api.ForkSandboxRequest
		if e := decode(r, &req); e != nil {
			return e
		}
		if r.URL.Query().Get("wait") != "running" {
			return &api.Error{Code: api.CodeInvalidArgument, Message: "fork without wait"}
		}
		if req.Count < 1 || req.Count > 3 {
			return &api.Error{Code: api.CodeInvalidArgument, Message: "count " + strconv.Itoa(req.Count) + ": want 1 to 3"}
		}
		out := api.ForkResult{}
		for n := range req.Count {
			sb := api.Sandbox{ID: "fk" + strconv.Itoa(n+1), State: api.StateRunning, Template: "base", Workdir: "/workspace"}
			if req.Names != nil {
				sb.Name = req.Names[n]
			}
			out.Items = append(out.Items, sb)
		}
		writeJSON(w, out)
		return nil
	})
	route("GET /v1/sandboxes/{ref}/network", "network", func(w http.ResponseWriter, r *http.Request) *api.Error {
		writeJSON(w, api.NetworkView{Policy: api.NetworkPolicy{Allow: f.policy}, Observations: f.observed})
		return nil
	})
	route("POST /v1/sandboxes/{ref}/commands", "exec", func(w http.ResponseWriter, r *http.Request) *api.Error {
		f.exec = api.CreateCommandRequest{}
		if e := decode(r, &f.exec); e != nil {
			return e
		}
		id := "cmd" + strconv.Itoa(len(f.commands)+1)
		f.commands[id] = f.exec.Command
		writeJSON(w, api.Command{ID: id, SandboxID: "sb1", Command: f.exec.Command})
		return nil
	})
	mux.HandleFunc("GET /v1/sandboxes/{ref}/commands/{id}/output", func(w http.ResponseWriter, r *http.Request) {
		// Streams: it answers outside f.mu, and may hang until the
		// caller goes.
		f.mu.Lock()
		f.calls = append(f.calls, "output")
		f.outputQ = append(f.outputQ, r.URL.RawQuery)
		e := f.fail["output"]
		line, ok := f.commands[r.PathValue("id")]
		if e == nil && !ok {
			e = &api.Error{Code: api.CodeNotFound, Message: "command " + r.PathValue("id") + " not found"}
		}
		recs, hang := slices.Clone(f.scripts[line]), f.hang[line]
		f.mu.Unlock()
		if e != nil {
			writeErr(w, e)
			return
		}
		after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		for _, rec := range recs {
			if rec.Seq > after {
				enc.Encode(rec)
			}
		}
		w.(http.Flusher).Flush()
		if hang {
			<-r.Context().Done()
		}
	})
	route("POST /v1/sandboxes/{ref}/commands/{id}/stdin", "stdin", func(w http.ResponseWriter, r *http.Request) *api.Error {
		io.Copy(&f.stdin, r.Body)
		f.stdinEOF = r.URL.Query().Get("eof") == "true"
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	route("GET /v1/sandboxes/{ref}/files/content", "read", func(w http.ResponseWriter, r *http.Request) *api.Error {
		ff, ok := f.files[r.URL.Query().Get("path")]
		if !ok {
			return &api.Error{Code: api.CodeNotFound, Message: "no such file: " + r.URL.Query().Get("path")}
		}
		sum := sha256.Sum256(ff.content)
		if f.badDigest {
			sum[0] ^= 1
		}
		w.Header().Set("ETag", `"`+version(ff)+`"`)
		w.Header().Set("Repr-Digest", api.FormatReprDigest(sum[:]))
		w.Header().Set("Content-Length", strconv.Itoa(len(ff.content)))
		w.Write(ff.content)
		return nil
	})
	route("PUT /v1/sandboxes/{ref}/files/content", "write", func(w http.ResponseWriter, r *http.Request) *api.Error {
		p := r.URL.Query().Get("path")
		ff, exists := f.files[p]
		if e := precondition(r, ff, exists); e != nil {
			return e
		}
		b, _ := io.ReadAll(r.Body)
		if !exists {
			ff = &fakeFile{}
			f.files[p] = ff
		}
		ff.content, ff.version = b, ff.version+1
		f.writeMode = r.URL.Query().Get("mode")
		writeJSON(w, f.entry(p, ff))
		return nil
	})
	route("PATCH /v1/sandboxes/{ref}/files/content", "edit", func(w http.ResponseWriter, r *http.Request) *api.Error {
		p := r.URL.Query().Get("path")
		ff, exists := f.files[p]
		if !exists {
			return &api.Error{Code: api.CodeNotFound, Message: "no such file: " + p}
		}
		if e := precondition(r, ff, exists); e != nil {
			return e
		}
		var req api.EditFileRequest
		if e := decode(r, &req); e != nil {
			return e
		}
		s := string(ff.content)
		for i, ed := range req.Edits {
			if n := strings.Count(s, ed.Old); n != 1 {
				return &api.Error{Code: api.CodeConflict, Message: fmt.Sprintf("edit %d: old text occurs %d times", i, n)}
			}
			s = strings.Replace(s, ed.Old, ed.New, 1)
		}
		ff.content, ff.version = []byte(s), ff.version+1
		writeJSON(w, f.entry(p, ff))
		return nil
	})
	route("GET /v1/sandboxes/{ref}/files", "ls", func(w http.ResponseWriter, r *http.Request) *api.Error {
		f.lsQ = r.URL.RawQuery
		dir := r.URL.Query().Get("path")
		out := api.List[api.FileEntry]{Items: []api.FileEntry{}}
		for _, p := range slices.Sorted(maps.Keys(f.files)) {
			if strings.HasPrefix(p, dir+"/") {
				out.Items = append(out.Items, f.entry(p, f.files[p]))
			}
		}
		writeJSON(w, out)
		return nil
	})
	return mux
}

// precondition checks If-Match and If-None-Match as the API does.
func precondition(r *http.Request, ff *fakeFile, exists bool) *api.Error {
	if m := r.Header.Get("If-Match"); m != "" && (!exists || m != `"`+version(ff)+`"`) {
		return &api.Error{Code: api.CodePreconditionFailed, Message: "the file is not at version " + strings.Trim(m, `"`)}
	}
	if r.Header.Get("If-None-Match") == "*" && exists {
		return &api.Error{Code: api.CodePreconditionFailed, Message: "the file exists"}
	}
	return nil
}
