package rootfs

import "strings"

// The grammar of image references (github.com/distribution/reference) and
// of a docker save's blob paths, as plain functions rather than regular
// expressions: compiled at package init, those cost every podlab command
// and every shim start about half a millisecond, the registry host's most
// of it. grammar_test.go holds the expressions and checks these against
// them.

// validPathComponent reports whether s is a repository path component:
// lowercase letters and digits, runs of them joined by one '.', one or
// two '_', or any number of '-' (^[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*$).
func validPathComponent(s string) bool {
	i := 0
	for {
		run := i
		for i < len(s) && isLowerAlnumByte(s[i]) {
			i++
		}
		if i == run {
			return false // empty, or a separator not between letters or digits
		}
		if i == len(s) {
			return true
		}
		switch s[i] {
		case '.':
			i++
		case '_':
			i++
			if i < len(s) && s[i] == '_' {
				i++
			}
		case '-':
			for i < len(s) && s[i] == '-' {
				i++
			}
		default:
			return false
		}
	}
}

// validDomain reports whether s is a registry host with an optional port:
// host name labels (letters, digits and inner '-') joined by '.', or a
// bracketed IPv6 address, then ':' and digits.
func validDomain(s string) bool {
	host, port, hasPort := s, "", false
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return false
		}
		host, port = s[:end+1], s[end+1:]
		if port != "" {
			if port, hasPort = strings.CutPrefix(port, ":"); !hasPort {
				return false
			}
		}
	} else {
		host, port, hasPort = strings.Cut(s, ":")
	}
	if hasPort && !allDigits(port) {
		return false
	}
	if strings.HasPrefix(host, "[") {
		return validBracketedIPv6(host)
	}
	return validHostName(host)
}

// validBracketedIPv6 reports whether s is "[" hex digits and colons "]".
func validBracketedIPv6(s string) bool {
	if len(s) < 3 || s[len(s)-1] != ']' {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if !isHexDigit(s[i]) && s[i] != ':' {
			return false
		}
	}
	return true
}

// validHostName reports whether s is labels joined by '.', each letters
// and digits with inner '-'.
func validHostName(s string) bool {
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || !isAlnumByte(label[0]) || !isAlnumByte(label[len(label)-1]) {
			return false
		}
		for i := 1; i < len(label)-1; i++ {
			if !isAlnumByte(label[i]) && label[i] != '-' {
				return false
			}
		}
	}
	return true
}

// allDigits reports whether s is one or more decimal digits.
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// validTag reports whether s is a tag: a word character, then up to 127
// of word characters, '.' and '-' (^[\w][\w.-]{0,127}$).
func validTag(s string) bool {
	if s == "" || len(s) > 128 || !isWordByte(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isWordByte(s[i]) && s[i] != '.' && s[i] != '-' {
			return false
		}
	}
	return true
}

// parseBlobName splits a docker save's content-addressed path,
// blobs/<sha256|sha384|sha512>/<lowercase hex>.
func parseBlobName(name string) (alg, encoded string, ok bool) {
	rest, found := strings.CutPrefix(name, "blobs/")
	if !found {
		return "", "", false
	}
	alg, encoded, found = strings.Cut(rest, "/")
	if !found || encoded == "" {
		return "", "", false
	}
	switch alg {
	case "sha256", "sha384", "sha512":
	default:
		return "", "", false
	}
	for i := 0; i < len(encoded); i++ {
		if c := encoded[i]; !(c >= '0' && c <= '9') && !(c >= 'a' && c <= 'f') {
			return "", "", false
		}
	}
	return alg, encoded, true
}

func isLowerAlnumByte(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

func isAlnumByte(c byte) bool { return isLowerAlnumByte(c) || c >= 'A' && c <= 'Z' }

func isWordByte(c byte) bool { return isAlnumByte(c) || c == '_' }

func isHexDigit(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
