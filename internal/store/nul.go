package store

import "strings"

// NUL (U+0000) is text PostgreSQL refuses, in text and in jsonb columns,
// where SQLite keeps it. The API refuses it in what a caller writes; what
// the system writes (an error a sandbox or node returned, a snippet of a
// command's output in an event) may hold one. Both stores replace it with
// U+FFFD before writing, so they return the same text.

// Replacement is what a NUL is stored as.
const Replacement = "\uFFFD"

// CleanText returns s with each NUL replaced.
func CleanText(s string) string {
	if !strings.Contains(s, "\x00") {
		return s
	}
	return strings.ReplaceAll(s, "\x00", Replacement)
}

// CleanJSON returns encoded JSON with each escaped NUL (\u0000) inside
// its strings replaced by \ufffd. It reads escapes pairwise, so an escaped
// backslash followed by the text u0000 is left as it is.
func CleanJSON(b []byte) []byte {
	if !strings.Contains(string(b), `\u0000`) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) && string(b[i+2:i+6]) == "0000" {
			out = append(out, `\ufffd`...)
			i += 5
			continue
		}
		out = append(out, b[i], b[i+1])
		i++
	}
	return out
}
