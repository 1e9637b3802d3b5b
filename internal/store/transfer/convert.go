package transfer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// column is a target column: its name and PostgreSQL type as
// information_schema names them (data_type, and udt_name for arrays).
type column struct {
	name     string
	dataType string
	udt      string
}

// convert turns a value SQLite returned for a column into the value the
// target column takes. SQLite keeps times as RFC 3339 text, booleans as
// 0 and 1, JSON as text; PostgreSQL has a type for each.
func convert(c column, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch c.dataType {
	case "timestamp with time zone", "timestamp without time zone":
		s, ok := text(v)
		if !ok {
			return nil, fmt.Errorf("a time is stored as %T", v)
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, fmt.Errorf("a time %q: %w", s, err)
		}
		// PostgreSQL keeps microseconds; the store truncates what it
		// writes to them, and so does the move (rounding could put a
		// time after one written later).
		return t.UTC().Truncate(time.Microsecond), nil
	case "boolean":
		switch x := v.(type) {
		case int64:
			return x != 0, nil
		case bool:
			return x, nil
		}
		return nil, fmt.Errorf("a boolean is stored as %T %v", v, v)
	case "json", "jsonb":
		s, ok := text(v)
		if !ok || !json.Valid([]byte(s)) {
			return nil, fmt.Errorf("not JSON: %.40q", fmt.Sprint(v))
		}
		if hasNULEscape(s) {
			return nil, errNUL
		}
		return json.RawMessage(s), nil
	case "bytea":
		switch x := v.(type) {
		case []byte:
			return x, nil
		case string:
			return []byte(x), nil
		}
		return nil, fmt.Errorf("bytes are stored as %T", v)
	case "bigint", "integer", "smallint":
		switch x := v.(type) {
		case int64:
			return x, nil
		case float64:
			if x != float64(int64(x)) {
				return nil, fmt.Errorf("an integer is stored as %v", x)
			}
			return int64(x), nil
		}
		return nil, fmt.Errorf("an integer is stored as %T %v", v, v)
	case "double precision", "real", "numeric":
		switch x := v.(type) {
		case float64:
			return x, nil
		case int64:
			return float64(x), nil
		}
		return nil, fmt.Errorf("a number is stored as %T %v", v, v)
	case "text", "character varying", "character":
		switch x := v.(type) {
		case string, []byte:
			s, _ := text(x)
			if strings.ContainsRune(s, 0) {
				return nil, errNUL
			}
			if !utf8.ValidString(s) {
				return nil, fmt.Errorf("text that is not UTF-8, which PostgreSQL cannot store: %.40q", s)
			}
			return s, nil
		case int64:
			return strconv.FormatInt(x, 10), nil
		case float64:
			return strconv.FormatFloat(x, 'g', -1, 64), nil
		}
		return nil, fmt.Errorf("text is stored as %T", v)
	case "ARRAY":
		// A list SQLite kept as a JSON array.
		s, ok := text(v)
		if !ok {
			return nil, fmt.Errorf("a list is stored as %T", v)
		}
		switch c.udt {
		case "_text", "_varchar":
			var l []string
			if err := json.Unmarshal([]byte(s), &l); err != nil {
				return nil, fmt.Errorf("a list %.40q: %w", s, err)
			}
			if l == nil {
				l = []string{}
			}
			return l, nil
		case "_int8", "_int4":
			var l []int64
			if err := json.Unmarshal([]byte(s), &l); err != nil {
				return nil, fmt.Errorf("a list %.40q: %w", s, err)
			}
			if l == nil {
				l = []int64{}
			}
			return l, nil
		}
	}
	return nil, fmt.Errorf("no conversion from SQLite to PostgreSQL type %s (%s)", c.dataType, c.udt)
}

// errNUL refuses a NUL character: PostgreSQL stores none in text nor in
// jsonb (the escape \u0000), while SQLite kept whatever it was given.
var errNUL = errors.New("a NUL character, which PostgreSQL cannot store")

// hasNULEscape reports whether JSON text holds the escape \u0000 (and
// not an escaped backslash followed by "u0000").
func hasNULEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		if strings.HasPrefix(s[i+1:], "u0000") {
			return true
		}
		i++ // the escaped character
	}
	return false
}

func text(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	}
	return "", false
}
