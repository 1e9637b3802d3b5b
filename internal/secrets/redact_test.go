package secrets

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// reference redacts a whole text at once, by brute force: every
// occurrence of every value, those inside another dropped, each replaced
// in the order they start, the bytes no occurrence covers kept.
func reference(secrets []Secret, text []byte) []byte {
	type occ struct {
		start, end int
		name       string
	}
	seen := map[string]bool{}
	var occs []occ
	for _, s := range secrets {
		if len(s.Value) < MinRedactLen || seen[s.Value] {
			continue
		}
		seen[s.Value] = true
		for i := 0; i+len(s.Value) <= len(text); i++ {
			if string(text[i:i+len(s.Value)]) == s.Value {
				occs = append(occs, occ{i, i + len(s.Value), s.Name})
			}
		}
	}
	var kept []occ
	for _, o := range occs {
		inside := false
		for _, p := range occs {
			if p != o && p.start <= o.start && o.end <= p.end && (p.start != o.start || p.end != o.end) {
				inside = true
			}
		}
		if !inside {
			kept = append(kept, o)
		}
	}
	slices.SortFunc(kept, func(a, b occ) int { return a.start - b.start })
	covered := make([]bool, len(text))
	starts := map[int]string{}
	for _, o := range kept {
		starts[o.start] = o.name
		for i := o.start; i < o.end; i++ {
			covered[i] = true
		}
	}
	var out []byte
	for i := range text {
		if name, ok := starts[i]; ok {
			out = append(out, Replacement(name)...)
		}
		if !covered[i] {
			out = append(out, text[i])
		}
	}
	return out
}

func redactWrites(r *Redactor, writes [][]byte) []byte {
	var out []byte
	for _, w := range writes {
		out = r.Write(out, w)
	}
	return r.Flush(out)
}

func TestRedactor(t *testing.T) {
	tok := Secret{"tok", "ghp_0123456789abcdef"}
	tests := []struct {
		name    string
		secrets []Secret
		in      string
		want    string
	}{
		{"none", []Secret{tok}, "hello world", "hello world"},
		{"whole", []Secret{tok}, "x ghp_0123456789abcdef y", "x [secret:tok] y"},
		{"twice", []Secret{tok}, "ghp_0123456789abcdefghp_0123456789abcdef", "[secret:tok][secret:tok]"},
		{"prefix only", []Secret{tok}, "ghp_0123456789abcde", "ghp_0123456789abcde"},
		{"prefix then match", []Secret{tok}, "ghp_0ghp_0123456789abcdef", "ghp_0[secret:tok]"},
		{"short value kept", []Secret{{"pin", "1234567"}}, "pin 1234567", "pin 1234567"},
		{"eight bytes redacted", []Secret{{"pin", "12345678"}}, "pin 12345678.", "pin [secret:pin]."},
		{"overlapping", []Secret{{"a", "abcdefgh"}, {"b", "efghijkl"}}, "-abcdefghijkl-", "-[secret:a][secret:b]-"},
		{"one inside another", []Secret{{"short", "bcdefghi"}, {"long", "abcdefghij"}}, "abcdefghij bcdefghi", "[secret:long] [secret:short]"},
		{"same value twice", []Secret{{"first", "samevalue"}, {"second", "samevalue"}}, "samevalue", "[secret:first]"},
		{"self-overlapping", []Secret{{"aa", "aaaaaaaa"}}, "aaaaaaaaaaa", "[secret:aa][secret:aa][secret:aa][secret:aa]"},
		{"binary", []Secret{{"bin", "\x00\xff\x00\xff\x00\xff\x00\xff"}}, "\x01\x00\xff\x00\xff\x00\xff\x00\xff\x02", "\x01[secret:bin]\x02"},
		{"multi-line", []Secret{{"pem", "-----BEGIN\nKEY\n-----END"}}, "k=-----BEGIN\nKEY\n-----END\n", "k=[secret:pem]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(reference(tt.secrets, []byte(tt.in))); got != tt.want {
				t.Fatalf("reference = %q; want %q (the test is wrong)", got, tt.want)
			}
			got := redactWrites(NewRedactor(tt.secrets, false), [][]byte{[]byte(tt.in)})
			if string(got) != tt.want {
				t.Errorf("one write: %q; want %q", got, tt.want)
			}
			// Every way of cutting the input in two, and in three.
			in := []byte(tt.in)
			for i := 0; i <= len(in); i++ {
				got := redactWrites(NewRedactor(tt.secrets, false), [][]byte{in[:i], in[i:]})
				if string(got) != tt.want {
					t.Errorf("split at %d: %q; want %q", i, got, tt.want)
				}
				for j := i; j <= len(in); j++ {
					got := redactWrites(NewRedactor(tt.secrets, false), [][]byte{in[:i], in[i:j], in[j:]})
					if string(got) != tt.want {
						t.Errorf("split at %d and %d: %q; want %q", i, j, got, tt.want)
					}
				}
			}
			// A byte at a time.
			var bytesIn [][]byte
			for i := range in {
				bytesIn = append(bytesIn, in[i:i+1])
			}
			if got := redactWrites(NewRedactor(tt.secrets, false), bytesIn); string(got) != tt.want {
				t.Errorf("byte by byte: %q; want %q", got, tt.want)
			}
		})
	}
}

// TestRedactorHoldsOnlyPrefixes checks what a write leaves held: nothing
// after ordinary output, and no more than the longest value less one byte,
// all of it a beginning of some value.
func TestRedactorHoldsOnlyPrefixes(t *testing.T) {
	secrets := []Secret{{"a", "secret-value-one"}, {"b", "another-secret"}}
	r := NewRedactor(secrets, false)
	var out []byte
	out = r.Write(out, []byte("plain output\n"))
	if string(out) != "plain output\n" || r.Held() != 0 {
		t.Fatalf("plain output: sent %q, held %d; want all sent", out, r.Held())
	}
	out = r.Write(out[:0], []byte("x secret-val"))
	if string(out) != "x " || r.Held() != len("secret-val") {
		t.Fatalf("a beginning: sent %q, held %d; want \"x \" sent and 10 held", out, r.Held())
	}
	out = r.Write(out[:0], []byte("ue-one!"))
	if string(out) != "[secret:a]!" || r.Held() != 0 {
		t.Fatalf("the rest: sent %q, held %d", out, r.Held())
	}
	out = r.Write(out[:0], []byte("another-secre"))
	if len(out) != 0 || r.Held() != 13 {
		t.Fatalf("sent %q, held %d", out, r.Held())
	}
	if out = r.Flush(out[:0]); string(out) != "another-secre" || r.Held() != 0 {
		t.Fatalf("flush sent %q, held %d", out, r.Held())
	}
	// After a flush, a value is looked for afresh.
	if out = r.Write(out[:0], []byte("t")); string(out) != "t" {
		t.Fatalf("after flush: %q", out)
	}
}

func TestRedactorCRLF(t *testing.T) {
	pem := Secret{"pem", "line one\nline two\n"}
	r := NewRedactor([]Secret{pem}, true)
	got := redactWrites(r, [][]byte{[]byte("$ cat key\r\nline one\r\nline two\r\n$ ")})
	if string(got) != "$ cat key\r\n[secret:pem]$ " {
		t.Errorf("terminal output: %q", got)
	}
	r = NewRedactor([]Secret{pem}, false)
	if got := redactWrites(r, [][]byte{[]byte("line one\nline two\n")}); string(got) != "[secret:pem]" {
		t.Errorf("pipe output: %q", got)
	}
}

func TestRedactorReset(t *testing.T) {
	r := NewRedactor([]Secret{{"a", "aaaa-bbbb-cccc"}}, false)
	out := r.Write(nil, []byte("x aaaa-bbbb-"))
	// A secret added later is found in what is still held.
	r.Reset([]Secret{{"a", "aaaa-bbbb-cccc"}, {"d", "bbbb-dddd"}}, false)
	out = r.Write(out, []byte("dddd y"))
	out = r.Flush(out)
	if string(out) != "x aaaa-[secret:d] y" {
		t.Errorf("got %q", out)
	}
}

// TestRedactorProperty writes random streams, made of random bytes and
// pieces of overlapping values, in two million random writes in all, and
// checks each against the reference: the cut into writes never matters,
// what is held stays bounded, and no value survives.
func TestRedactorProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abcdefgh-"
	randString := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	writes, rounds := 0, 0
	for writes < 2_000_000 {
		rounds++
		// Values that share pieces, so they overlap and nest.
		base := randString(24)
		var secrets []Secret
		for i := range 1 + rng.IntN(5) {
			var v string
			switch rng.IntN(3) {
			case 0:
				v = randString(MinRedactLen + rng.IntN(12))
			case 1:
				a := rng.IntN(len(base) - MinRedactLen)
				v = base[a : a+MinRedactLen+rng.IntN(len(base)-a-MinRedactLen+1)]
			default:
				v = strings.Repeat(randString(1+rng.IntN(3)), 16)[:MinRedactLen+rng.IntN(6)]
			}
			if rng.IntN(10) == 0 {
				v = v[:MinRedactLen-1-rng.IntN(3)] // too short to redact
			}
			secrets = append(secrets, Secret{Name: string(rune('A' + i)), Value: v})
		}
		maxLen := 0
		for _, s := range secrets {
			if len(s.Value) >= MinRedactLen {
				maxLen = max(maxLen, len(s.Value))
			}
		}
		var text []byte
		for len(text) < 4000 {
			switch rng.IntN(4) {
			case 0:
				text = append(text, randString(rng.IntN(20))...)
			case 1:
				s := secrets[rng.IntN(len(secrets))].Value
				text = append(text, s...)
			case 2:
				s := secrets[rng.IntN(len(secrets))].Value
				text = append(text, s[:rng.IntN(len(s))]...)
			default:
				a := rng.IntN(len(base))
				text = append(text, base[a:a+rng.IntN(len(base)-a)]...)
			}
		}
		want := reference(secrets, text)

		r := NewRedactor(secrets, false)
		var got []byte
		for rest := text; len(rest) > 0; writes++ {
			n := min(len(rest), 1+rng.IntN(8))
			if rng.IntN(50) == 0 {
				n = min(len(rest), rng.IntN(200))
			}
			got = r.Write(got, rest[:n])
			rest = rest[n:]
			if held := r.Held(); held > max(maxLen-1, 0) {
				t.Fatalf("round %d: holds %d bytes; the longest value is %d", rounds, held, maxLen)
			} else if held > 0 && !beginsValue(secrets, r.buf) {
				t.Fatalf("round %d: holds %q, which begins no value", rounds, r.buf)
			}
		}
		got = r.Flush(got)
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: secrets %q\ntext %q\ngot  %q\nwant %q", rounds, secrets, text, got, want)
		}
		for _, s := range secrets {
			if len(s.Value) >= MinRedactLen && bytes.Contains(got, []byte(s.Value)) {
				t.Fatalf("round %d: value %q survived in %q", rounds, s.Value, got)
			}
		}
	}
	t.Logf("%d writes in %d rounds", writes, rounds)
}

func beginsValue(secrets []Secret, held []byte) bool {
	for _, s := range secrets {
		if len(s.Value) >= MinRedactLen && len(held) < len(s.Value) && strings.HasPrefix(s.Value, string(held)) {
			return true
		}
	}
	return false
}

func BenchmarkRedactor(b *testing.B) {
	secrets := []Secret{{"a", "ghp_0123456789abcdefghij"}, {"b", "sk-live-abcdefghijklmnop"}, {"c", "hunter2hunter2"}}
	chunk := bytes.Repeat([]byte("some ordinary build output, gcc -O2 -c main.c -o main.o\n"), 1000)
	r := NewRedactor(secrets, false)
	var out []byte
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		out = r.Write(out[:0], chunk)
	}
}

// BenchmarkRedactorHostile is output crafted against the matcher: every
// byte continues a partial match of a long value that never completes.
func BenchmarkRedactorHostile(b *testing.B) {
	long := strings.Repeat("a", 4095) + "b"
	secrets := []Secret{{"long", long}, {"a", "ghp_0123456789abcdefghij"}, {"b", "sk-live-abcdefghijklmnop"}}
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	r := NewRedactor(secrets, false)
	var out []byte
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		out = r.Write(out[:0], chunk)
	}
}

// TestRedactorRelease checks that Release lets out a held part of a value
// only while it is shorter than KeepPartial, that bytes it let out are not
// taken back, and that the rest of the value they began is still replaced.
func TestRedactorRelease(t *testing.T) {
	tok := Secret{"tok", "tok-0123456789"}
	for name, tc := range map[string]struct {
		secrets []Secret
		// writes, with a Release after each but the last, then a Flush.
		writes   []string
		released string // what is out after the first Release
		want     string
	}{
		"a short part goes out, the rest is still hidden": {
			secrets:  []Secret{tok},
			writes:   []string{"a to", "k-0123456789 b"},
			released: "a to",
			want:     "a to[secret:tok] b",
		},
		"a long part stays held across every release": {
			secrets:  []Secret{tok},
			writes:   []string{"a tok-01", "2345", "6789 b tok-9"},
			released: "a ",
			want:     "a [secret:tok] b tok-9",
		},
		"one byte short of the whole value": {
			secrets:  []Secret{tok},
			writes:   []string{"tok-012345678", "9"},
			released: "",
			want:     "[secret:tok]",
		},
		"a long part that never completes goes out at the flush": {
			secrets:  []Secret{tok},
			writes:   []string{"$ tok-01"},
			released: "$ ",
			want:     "$ tok-01",
		},
		"released three bytes at a time": {
			secrets:  []Secret{tok},
			writes:   []string{"tok", "-", "0123456789"},
			released: "tok",
			want:     "tok[secret:tok]",
		},
		"the longest part under way counts": {
			secrets:  []Secret{tok, {"x", "k-01abcdefgh"}},
			writes:   []string{"a tok-01", "abcdefgh"},
			released: "a ",
			want:     "a to[secret:x]",
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := NewRedactor(tc.secrets, false)
			var got []byte
			out := func(_ byte, b []byte) { got = append(got, b...) }
			for i, w := range tc.writes {
				got = r.Write(got, []byte(w))
				if i == len(tc.writes)-1 {
					break
				}
				r.Release(out)
				if i == 0 && string(got) != tc.released {
					t.Fatalf("after the first release %q, want %q", got, tc.released)
				}
			}
			got = r.Flush(got)
			if string(got) != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRedactorReleaseProperty writes values, short starts of values and
// other bytes in random pieces with a Release after most writes, as a
// terminal paused between them, and checks that no value is ever let out
// with KeepPartial or more of its bytes in clear.
func TestRedactorReleaseProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	randString := func(alphabet string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for round := range 3000 {
		// Values over a small alphabet, so that they overlap and nest;
		// other output over letters no value has, between every two
		// pieces, so that all clear bytes of values next to each other
		// come from one value.
		var secrets []Secret
		for i := range 1 + rng.IntN(3) {
			secrets = append(secrets, Secret{Name: string(rune('A' + i)), Value: randString("ab-", MinRedactLen+rng.IntN(8))})
		}
		var text []byte
		for len(text) < 400 {
			text = append(text, randString("xy \n", 1+rng.IntN(6))...)
			v := secrets[rng.IntN(len(secrets))].Value
			if rng.IntN(3) == 0 {
				v = v[:rng.IntN(KeepPartial)] // a start too short to hold
			}
			text = append(text, v...)
		}
		r := NewRedactor(secrets, rng.IntN(2) == 0)
		var got []byte
		out := func(_ byte, b []byte) { got = append(got, b...) }
		for rest := text; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(6))
			got = r.Write(got, rest[:n])
			rest = rest[n:]
			if rng.IntN(4) != 0 {
				r.Release(out)
			}
		}
		got = r.Flush(got)
		clear := got
		for _, s := range secrets {
			clear = bytes.ReplaceAll(clear, []byte(Replacement(s.Name)), []byte("|"))
		}
		for _, s := range secrets {
			for i := 0; i+KeepPartial <= len(s.Value); i++ {
				if piece := s.Value[i : i+KeepPartial]; bytes.Contains(clear, []byte(piece)) {
					t.Fatalf("round %d: %q of value %q is in %q\ntext %q", round, piece, s.Value, got, text)
				}
			}
		}
	}
}

// TestRedactorSources checks a value split between two sources, and that
// what is let out keeps each byte's source.
func TestRedactorSources(t *testing.T) {
	r := NewRedactor([]Secret{{"tok", "tok-0123456789"}}, false)
	var got []string
	var last byte
	out := func(src byte, b []byte) {
		if n := len(got); n > 0 && src == last {
			got[n-1] += string(b) // one run, let out in two calls
			return
		}
		last = src
		got = append(got, fmt.Sprintf("%d:%s", src, b))
	}
	r.WriteFrom(1, []byte("x tok-01"), out)
	r.WriteFrom(2, []byte("23456789 y"), out)
	r.WriteFrom(1, []byte(" tok"), out)
	r.WriteFrom(2, []byte("e"), out)
	r.FlushTo(out)
	want := []string{"1:x [secret:tok]", "2: y", "1: tok", "2:e"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
