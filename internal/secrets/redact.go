package secrets

import (
	"bytes"
	"slices"
)

// MinRedactLen is the shortest value that is redacted. A shorter value
// would match by chance in ordinary output (a 4-byte value shows up every
// few megabytes of random bytes, a common word far more often), turning
// output into noise while its few bytes are guessed quickly anyway.
const MinRedactLen = 8

// Secret is a value to keep out of recorded output, and its name, which
// replaces it there as [secret:NAME].
type Secret struct {
	Name  string
	Value string
}

// Replacement is what stands in recorded output for a secret's value.
func Replacement(name string) string { return "[secret:" + name + "]" }

// Redactor replaces every occurrence of its secrets' values in one stream
// of bytes, written in pieces, with [secret:NAME]: also a value split
// across writes. It holds back only bytes that could still begin a value
// (at most the longest value less one byte) and sends them on with the next
// write, or at Flush, or at Release while they are a short part of a value.
//
// The stream may interleave several sources (a command's stdout and
// stderr), each byte tagged with its source by WriteFrom: values are then
// matched across sources too (half a token on stdout, half on stderr), and
// what is sent comes back in runs of one source each, in stream order. A
// replacement goes to the source of the first byte of the value still
// held.
//
// Occurrences that overlap are all hidden: each contributes its
// replacement, in the order they start, and an occurrence inside another
// is the other's. The result does not depend on how the stream was cut
// into writes.
//
// The values are matched with one Knuth-Morris-Pratt automaton each, so a
// write costs at most (its length) × (number of values) steps, however the
// output is crafted. A Redactor is not safe for concurrent use.
type Redactor struct {
	pats   []pattern
	first  [256]bool // bytes that begin a value
	states []int     // per pattern: longest suffix of the stream that is a proper prefix of its value
	active int       // patterns whose state is not 0

	buf     []byte // not yet sent, starting at stream position base
	tags    []byte // the source of each byte of buf
	base    int64
	end     int64
	occ     []occurrence // found, not yet sent
	covered int64        // stream position up to which sent occurrences hide bytes
}

type pattern struct {
	value []byte
	repl  []byte
	fail  []int // fail[j]: longest proper prefix of value[:j+1] that is also its suffix
}

type occurrence struct {
	start, end int64
	pat        int
}

// NewRedactor returns a redactor of the values of secrets that are at
// least MinRedactLen bytes long. A value given twice keeps its first name.
// With crlf, a value holding a newline is also matched as a terminal
// shows it, each "\n" as "\r\n".
func NewRedactor(secrets []Secret, crlf bool) *Redactor {
	r := &Redactor{}
	r.setSecrets(secrets, crlf)
	return r
}

func (r *Redactor) setSecrets(secrets []Secret, crlf bool) {
	seen := map[string]bool{}
	add := func(name, v string) {
		if len(v) < MinRedactLen || seen[v] {
			return
		}
		seen[v] = true
		r.pats = append(r.pats, newPattern(name, v))
		r.first[v[0]] = true
	}
	for _, s := range secrets {
		add(s.Name, s.Value)
	}
	if crlf {
		for _, s := range secrets {
			if bytes.IndexByte([]byte(s.Value), '\n') >= 0 {
				add(s.Name, string(bytes.ReplaceAll([]byte(s.Value), []byte("\n"), []byte("\r\n"))))
			}
		}
	}
	r.states = make([]int, len(r.pats))
}

func newPattern(name, v string) pattern {
	p := pattern{value: []byte(v), repl: []byte(Replacement(name)), fail: make([]int, len(v))}
	k := 0
	for i := 1; i < len(v); i++ {
		for k > 0 && v[i] != v[k] {
			k = p.fail[k-1]
		}
		if v[i] == v[k] {
			k++
		}
		p.fail[i] = k
	}
	return p
}

// Empty reports that the redactor has no value to look for.
func (r *Redactor) Empty() bool { return len(r.pats) == 0 }

// Held is how many bytes the redactor holds back.
func (r *Redactor) Held() int { return len(r.buf) }

// Partial is the length of the longest part of a value the stream ends
// with: how much of a value the held bytes, and any released before them
// by Release, would complete. It is 0 when nothing is under way.
func (r *Redactor) Partial() int {
	longest := 0
	for _, q := range r.states {
		longest = max(longest, q)
	}
	return longest
}

// Reset replaces the secrets; the bytes held are matched again against the
// new ones (nothing already sent is recalled).
func (r *Redactor) Reset(secrets []Secret, crlf bool) {
	held, tags, base, covered := r.buf, r.tags, r.base, r.covered
	*r = Redactor{}
	r.setSecrets(secrets, crlf)
	r.base, r.end, r.covered = base, base, covered
	// Held bytes keep their sources: feed them a run at a time.
	for len(held) > 0 {
		n := 1
		for n < len(held) && tags[n] == tags[0] {
			n++
		}
		r.feed(tags[0], held[:n])
		held, tags = held[n:], tags[n:]
	}
}

// Write takes the next bytes of the stream and returns what may be sent
// now, redacted, appended to dst. It is for a stream of one source.
func (r *Redactor) Write(dst, p []byte) []byte {
	r.WriteFrom(0, p, func(_ byte, b []byte) { dst = append(dst, b...) })
	return dst
}

// WriteFrom takes the next bytes of the stream, from source src, and
// passes what may be sent now, redacted, to out in runs of one source
// each, in stream order. out must not keep b.
func (r *Redactor) WriteFrom(src byte, p []byte, out func(src byte, b []byte)) {
	if len(r.pats) == 0 && len(r.buf) == 0 {
		r.base += int64(len(p))
		r.end = r.base
		if len(p) > 0 {
			out(src, p)
		}
		return
	}
	r.feed(src, p)
	// Bytes released already cannot be held again: the cut is never
	// before what was sent.
	r.emit(out, max(r.end-int64(r.Partial()), r.base))
}

// Flush returns every byte held, redacted, appended to dst, and forgets
// any value under way: one begun before a Flush and completed after it is
// not recognized (the stream was cut there).
func (r *Redactor) Flush(dst []byte) []byte {
	r.FlushTo(func(_ byte, b []byte) { dst = append(dst, b...) })
	return dst
}

// FlushTo is Flush for a stream of several sources.
func (r *Redactor) FlushTo(out func(src byte, b []byte)) {
	r.emit(out, r.end)
	clear(r.states)
	r.active = 0
}

// KeepPartial is the length from which Release keeps holding a part of a
// value under way, however long the pause: Release never lets out more
// than KeepPartial-1 bytes of a value before it completes. A shorter part
// is let out, since ordinary output ends with a value's first byte or two
// all the time (a prompt ending in its first letter) and must not wait for
// what follows; a longer one is rarely there by chance.
const KeepPartial = 4

// Release is for output that cannot wait for what follows (a terminal's
// prompt that happens to end like the start of a value). It sends the
// held bytes that begin no value, and the rest too when the part of a
// value they end with is shorter than KeepPartial; a longer part stays
// held until more is written or Flush. Matching goes on across it: when a
// value the released bytes began is completed later, its remaining bytes
// are still hidden and stand as its replacement.
func (r *Redactor) Release(out func(src byte, b []byte)) {
	cut := r.end
	if p := r.Partial(); p >= KeepPartial {
		cut = max(r.end-int64(p), r.base)
	}
	r.emit(out, cut)
}

// feed runs the automata over p, noting the occurrences that complete.
func (r *Redactor) feed(src byte, p []byte) {
	r.buf = append(r.buf, p...)
	n := len(r.tags)
	r.tags = append(r.tags, make([]byte, len(p))...)
	if src != 0 {
		for i := n; i < len(r.tags); i++ {
			r.tags[i] = src
		}
	}
	if len(r.pats) == 0 {
		r.end += int64(len(p))
		return
	}
	for i := 0; i < len(p); i++ {
		if r.active == 0 {
			// Nothing is under way: skip to a byte that begins a value.
			j := i
			for j < len(p) && !r.first[p[j]] {
				j++
			}
			r.end += int64(j - i)
			if i = j; i == len(p) {
				return
			}
		}
		b := p[i]
		r.end++
		for k := range r.pats {
			pat := &r.pats[k]
			q := r.states[k]
			was := q
			for q > 0 && pat.value[q] != b {
				q = pat.fail[q-1]
			}
			if pat.value[q] == b {
				q++
			}
			if q == len(pat.value) {
				r.occ = append(r.occ, occurrence{start: r.end - int64(q), end: r.end, pat: k})
				q = pat.fail[q-1]
			}
			r.states[k] = q
			switch {
			case was == 0 && q != 0:
				r.active++
			case was != 0 && q == 0:
				r.active--
			}
		}
	}
}

// emit sends the stream up to position cut: every occurrence starting
// before it (all of them are complete: none can begin before cut and end
// after what was written) as its replacement, and the bytes no occurrence
// hides, in runs of one source.
func (r *Redactor) emit(out func(src byte, b []byte), cut int64) {
	slices.SortFunc(r.occ, func(a, b occurrence) int {
		if a.start != b.start {
			return int(a.start - b.start)
		}
		return int(b.end - a.end) // the longer first
	})
	raw := func(from, to int64) {
		from = max(from, r.covered, r.base)
		for from < to {
			i := from - r.base
			n := int64(1)
			for from+n < to && r.tags[i+n] == r.tags[i] {
				n++
			}
			out(r.tags[i], r.buf[i:i+n])
			from += n
		}
	}
	cur := r.base
	keep := r.occ[:0]
	reach := r.covered // the furthest end of an occurrence sent or kept
	for _, o := range r.occ {
		if o.start >= cut {
			keep = append(keep, o)
			continue
		}
		if o.end <= reach {
			continue // inside an occurrence that starts no later
		}
		raw(cur, o.start)
		// The replacement goes where the occurrence's first byte still
		// held is (bytes before it were released, or hidden by another).
		first := max(o.start, r.covered, r.base)
		out(r.tags[first-r.base], r.pats[o.pat].repl)
		cur = o.start
		reach = o.end
		r.covered = max(r.covered, o.end)
	}
	raw(cur, cut)
	r.occ = keep
	// covered past cut stays: those held bytes are hidden already.
	n := copy(r.buf, r.buf[cut-r.base:])
	r.buf = r.buf[:n]
	copy(r.tags, r.tags[cut-r.base:])
	r.tags = r.tags[:n]
	r.base = cut
}
