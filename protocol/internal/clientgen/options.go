package clientgen

import (
	"fmt"
	"strings"

	"github.com/queenside/queenside/protocol"
)

const optionsSource = "protocol/op_queue.go"

// pythonOptions is the QueueOptions dataclass itself: generating the class,
// not a table it is built from, keeps its fields visible to type checkers.
func pythonOptions(specs []protocol.OptionSpec) []byte {
	var b strings.Builder
	b.WriteString(header("#", optionsSource))
	b.WriteString(`"""A queue's options (configure, queues), with the sidecar's defaults and ranges."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

# Every option: (wire name, attribute, default, minimum, maximum); flags
# have no range.
QUEUE_OPTIONS: Tuple[Tuple[str, str, Any, Optional[int], Optional[int]], ...] = (
`)
	for _, s := range specs {
		if s.Bool {
			fmt.Fprintf(&b, "    (%q, %q, %s, None, None),\n", s.Name, PythonName(s.Name), pythonBool(s.Default != 0))
		} else {
			fmt.Fprintf(&b, "    (%q, %q, %d, %d, %d),\n", s.Name, PythonName(s.Name), s.Default, s.Min, s.Max)
		}
	}
	b.WriteString(`)


@dataclass
class QueueOptions:
    """A queue's options, with the sidecar's defaults.

    ` + "``configure``" + ` replaces every option: one not given returns to its
    default. Start from the options in force (` + "``queues()``" + `) or from these
    defaults, and change what you need.
    """

`)
	for _, s := range specs {
		if s.Bool {
			fmt.Fprintf(&b, "    %s: bool = %s\n", PythonName(s.Name), pythonBool(s.Default != 0))
		} else {
			fmt.Fprintf(&b, "    %s: int = %d  # %s\n", PythonName(s.Name), s.Default, rangeText(s))
		}
	}
	// The keys in the order, and with the omissions, of the Go encoding,
	// so that both send the same bytes (the golden frames check it).
	b.WriteString("\n    def to_wire(self) -> Dict[str, Any]:\n        wire: Dict[str, Any] = {}\n")
	for _, s := range specs {
		if s.OmitEmpty {
			fmt.Fprintf(&b, "        if self.%s:\n    ", PythonName(s.Name))
		}
		fmt.Fprintf(&b, "        wire[%q] = self.%s\n", s.Name, PythonName(s.Name))
	}
	b.WriteString(`        return wire

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "QueueOptions":
        """The options as the sidecar sent them; one it left out has its default."""
        base = cls()
        return cls(
`)
	for _, s := range specs {
		get := fmt.Sprintf("d.get(%q, base.%s)", s.Name, PythonName(s.Name))
		if s.Bool {
			get = "bool(" + get + ")"
		}
		fmt.Fprintf(&b, "            %s=%s,\n", PythonName(s.Name), get)
	}
	b.WriteString("        )\n")
	return []byte(b.String())
}

func nodeOptions(specs []protocol.OptionSpec) []byte {
	var b strings.Builder
	b.WriteString(header("//", optionsSource))
	b.WriteString(`// A queue's options (configure, queues), with the sidecar's defaults and
// ranges.

/** Every option, in the protocol's order. */
export const QUEUE_OPTIONS = Object.freeze([
`)
	for _, s := range specs {
		if s.Bool {
			fmt.Fprintf(&b, "  Object.freeze({ name: '%s', type: 'boolean', default: %t }),\n", s.Name, s.Default != 0)
		} else {
			fmt.Fprintf(&b, "  Object.freeze({ name: '%s', type: 'integer', default: %d, min: %d, max: %d }),\n", s.Name, s.Default, s.Min, s.Max)
		}
	}
	b.WriteString(`]);

/** The options of a queue as the sidecar makes it (PROTOCOL.md, configure). */
export const DEFAULT_QUEUE_OPTIONS = Object.freeze({
`)
	for _, s := range specs {
		fmt.Fprintf(&b, "  %s: %s,\n", s.Name, jsDefault(s))
	}
	b.WriteString("});\n")
	return []byte(b.String())
}

func nodeOptionTypes(specs []protocol.OptionSpec) []byte {
	var b strings.Builder
	b.WriteString(header("//", optionsSource))
	b.WriteString("\n/** A queue's options; configure replaces them all (one left out returns to its default). */\nexport interface QueueOptions {\n")
	for _, s := range specs {
		typ := "number"
		if s.Bool {
			typ = "boolean"
		}
		fmt.Fprintf(&b, "  /** %s; default %s. */\n  %s?: %s;\n", rangeText(s), jsDefault(s), s.Name, typ)
	}
	b.WriteString(`}

export interface QueueOptionRow {
  readonly name: keyof QueueOptions;
  readonly type: 'integer' | 'boolean';
  readonly default: number | boolean;
  readonly min?: number;
  readonly max?: number;
}

export declare const QUEUE_OPTIONS: ReadonlyArray<QueueOptionRow>;
export declare const DEFAULT_QUEUE_OPTIONS: Readonly<Required<QueueOptions>>;
`)
	return []byte(b.String())
}

func rangeText(s protocol.OptionSpec) string {
	if s.Bool {
		return "true or false"
	}
	return fmt.Sprintf("%d..%d", s.Min, s.Max)
}

func jsDefault(s protocol.OptionSpec) string {
	if s.Bool {
		return fmt.Sprint(s.Default != 0)
	}
	return fmt.Sprint(s.Default)
}
