package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// ignoreCase is one case of the shared .coveignore vectors
// (sdk/testdata/coveignore.json), which every client runs.
type ignoreCase struct {
	Name   string            `json:"name"`
	Ignore map[string]string `json:"ignore"`
	Files  map[string]bool   `json:"files"`
}

func readVectors(t *testing.T) []ignoreCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "sdk", "testdata", "coveignore.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Cases []ignoreCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) == 0 {
		t.Fatal("no cases")
	}
	return v.Cases
}

// makeCase writes a case's folder, its ignore files named ignoreName, and
// returns the files an upload should hold.
func makeCase(t *testing.T, c ignoreCase, ignoreName string) (dir string, want []string) {
	t.Helper()
	dir = t.TempDir()
	write := func(rel, body string) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for rel, body := range c.Ignore {
		write(path.Join(path.Dir(rel), ignoreName), body)
		want = append(want, rel)
	}
	for rel, in := range c.Files {
		write(rel, "x")
		if in {
			want = append(want, rel)
		}
	}
	slices.Sort(want)
	return dir, want
}

// TestCoveignoreVectors packs each case's folder as the CLI does and
// checks that exactly the files the vectors include are uploaded.
func TestCoveignoreVectors(t *testing.T) {
	for _, c := range readVectors(t) {
		t.Run(c.Name, func(t *testing.T) {
			dir, want := makeCase(t, c, IgnoreFile)
			ex, err := NewExcluder(nil)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := WriteDir(&buf, dir, ex); err != nil {
				t.Fatal(err)
			}
			zr, err := gzip.NewReader(&buf)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			tr := tar.NewReader(zr)
			for {
				h, err := tr.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if h.Typeflag == tar.TypeReg {
					got = append(got, h.Name)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("uploaded %v\nwant       %v", got, want)
			}
		})
	}
}

// TestCoveignoreVectorsAreGits checks every expectation of the vectors
// against git itself: the same folder with its .coveignore files named
// .gitignore, asked of `git check-ignore`.
func TestCoveignoreVectorsAreGits(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	for _, c := range readVectors(t) {
		t.Run(c.Name, func(t *testing.T) {
			dir, _ := makeCase(t, c, ".gitignore")
			git := func(stdin string, args ...string) (string, error) {
				cmd := exec.Command(gitBin, args...)
				cmd.Dir = dir
				cmd.Stdin = strings.NewReader(stdin)
				cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_CONFIG_GLOBAL=/dev/null")
				out, err := cmd.Output()
				return string(out), err
			}
			if _, err := git("", "init", "-q"); err != nil {
				t.Fatal(err)
			}
			var paths []string
			for rel := range c.Files {
				paths = append(paths, rel)
			}
			slices.Sort(paths)
			// NUL-separated, so that names with spaces at their ends stay
			// whole.
			out, err := git(strings.Join(paths, "\x00")+"\x00", "check-ignore", "--stdin", "-z", "--no-index")
			var ee *exec.ExitError
			if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) { // 1: none ignored
				t.Fatalf("git check-ignore: %v", err)
			}
			ignored := map[string]bool{}
			for _, l := range strings.Split(strings.TrimSuffix(out, "\x00"), "\x00") {
				ignored[l] = true
			}
			for _, rel := range paths {
				if gitIn := !ignored[rel]; gitIn != c.Files[rel] {
					t.Errorf("%s: the vectors say uploaded=%v, git says ignored=%v", rel, c.Files[rel], !gitIn)
				}
			}
		})
	}
}
