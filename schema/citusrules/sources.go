package citusrules

import (
	"fmt"
	"go/scanner"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

var functionStart = regexp.MustCompile(`(?m)^CREATE OR REPLACE FUNCTION queenside\.([a-z_0-9]+)\(`)

// CheckSchemaFile checks every function of a file shaped as
// schema/current.sql, where each definition starts a line with CREATE OR
// REPLACE FUNCTION and ends before the next. Functions are named with the
// file ("current.sql: push").
func CheckSchemaFile(path string) ([]Violation, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	defs := functionDefinitions(string(text))
	if len(defs) == 0 {
		return nil, fmt.Errorf("%s: no function definitions found", path)
	}
	var out []Violation
	for _, d := range defs {
		out = append(out, CheckFunction(filepath.Base(path)+": "+d.name, d.text)...)
	}
	return dedupe(out), nil
}

// definition is one function's definition in a file shaped as
// schema/current.sql.
type definition struct{ name, text string }

// functionDefinitions splits such a file into its functions' definitions,
// in file order: each starts a line with CREATE OR REPLACE FUNCTION and
// ends before the next.
func functionDefinitions(s string) []definition {
	locs := functionStart.FindAllStringSubmatchIndex(s, -1)
	out := make([]definition, 0, len(locs))
	for i, loc := range locs {
		end := len(s)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		out = append(out, definition{s[loc[2]:loc[3]], s[loc[0]:end]})
	}
	return out
}

// CheckGoFiles checks the SQL in the string literals of Go source files
// (those naming a queenside table or function), each file one place.
func CheckGoFiles(paths []string) ([]Violation, error) {
	var out []Violation
	for _, path := range paths {
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		queries, err := goStrings(path, src)
		if err != nil {
			return nil, err
		}
		place := filepath.Base(path)
		for _, q := range queries {
			if strings.Contains(strings.ToLower(q), "force_generic_plan") {
				out = append(out, Violation{Place: place, Rule: NoForcedGenericPlan, Text: shorten(q)})
			}
			out = append(out, CheckStatements(place, q)...)
		}
	}
	return dedupe(out), nil
}

// goStrings gives the string literals of a Go file that mention queenside.
func goStrings(path string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	var s scanner.Scanner
	var failed error
	s.Init(fset.AddFile(path, -1, len(src)), src, func(pos token.Position, msg string) {
		failed = fmt.Errorf("%s: %s", pos, msg)
	}, 0)
	var out []string
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok != token.STRING || !strings.Contains(lit, "queenside.") {
			continue
		}
		text, err := strconv.Unquote(lit)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, text)
	}
	return out, failed
}
