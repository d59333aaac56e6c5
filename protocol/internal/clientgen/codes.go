package clientgen

import (
	"fmt"
	"strings"

	"github.com/queenside/queenside/protocol"
)

// pythonCodes is the code table errors.py makes its classes from, and
// the words of the per-item codes.
func pythonCodes(codes []protocol.Code, items []protocol.ItemCode) []byte {
	var b strings.Builder
	b.WriteString(header("#", "protocol/codes.go"))
	b.WriteString(`"""The protocol's error codes, in the contract's order (PROTOCOL.md, section 5).

Each row is (code, retryable, class name); errors.py binds its classes to
these rows, and exports one for every row.
"""

from typing import Dict, Tuple

CODES: Tuple[Tuple[str, bool, str], ...] = (
`)
	for _, c := range codes {
		fmt.Fprintf(&b, "    (%q, %s, %q),\n", c, pythonBool(c.Retryable()), ClassName(c))
	}
	b.WriteString(")\n\n# The per-item codes of ack, renew and release, and what each means in words.\nACK_ITEM_CODES: Dict[str, str] = {\n")
	for _, c := range items {
		fmt.Fprintf(&b, "    %q: %q,\n", c.Code, c.Text)
	}
	b.WriteString("}\n")
	return []byte(b.String())
}

// nodeCodes is the code table errors.js makes its classes from, and the
// words of the per-item codes.
func nodeCodes(codes []protocol.Code, items []protocol.ItemCode) []byte {
	var b strings.Builder
	b.WriteString(header("//", "protocol/codes.go"))
	b.WriteString(`// The protocol's error codes, in the contract's order (PROTOCOL.md,
// section 5): errors.js makes one class for each, and index.js exports it.

export const CODES = Object.freeze([
`)
	for _, c := range codes {
		fmt.Fprintf(&b, "  Object.freeze({ code: '%s', retryable: %t, className: '%s' }),\n", c, c.Retryable(), ClassName(c))
	}
	b.WriteString("]);\n\n// The per-item codes of ack, renew and release, and what each means in words.\nexport const ACK_ITEM_CODES = Object.freeze({\n")
	for _, c := range items {
		fmt.Fprintf(&b, "  %s: '%s',\n", c.Code, c.Text)
	}
	b.WriteString("});\n")
	return []byte(b.String())
}

func nodeCodeTypes(codes []protocol.Code) []byte {
	var b strings.Builder
	b.WriteString(header("//", "protocol/codes.go"))
	b.WriteString("\n/** A protocol error code. */\nexport type Code =\n")
	for i, c := range codes {
		sep := ""
		if i == len(codes)-1 {
			sep = ";"
		}
		fmt.Fprintf(&b, "  | '%s'%s\n", c, sep)
	}
	b.WriteString(`
export interface CodeRow {
  readonly code: Code;
  /** Whether the same request may succeed if sent again. */
  readonly retryable: boolean;
  /** The error class of the code, exported by the package. */
  readonly className: string;
}

export declare const CODES: ReadonlyArray<CodeRow>;

/** The per-item codes of ack, renew and release, and what each means in words. */
export declare const ACK_ITEM_CODES: Readonly<Record<string, string>>;
`)
	return []byte(b.String())
}

func pythonBool(v bool) string {
	if v {
		return "True"
	}
	return "False"
}
