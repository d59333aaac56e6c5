// Package citusrules checks SQL against the rules a statement must keep to
// run on a Citus cluster where queenside's per-partition tables are
// distributed by partition id (SCALING.md, "The rules"). It reads text
// only, so the check runs wherever the tests do, Citus or not: a rule
// broken in a migration or in the store fails the build before anything
// reaches a cluster.
//
// The check is lexical, not a parser's. It splits a text into statements
// (outside quotes, dollar quotes and comments), lower-cases them and looks
// for the shapes each rule forbids. It can be fooled by SQL written to fool
// it; it is written to catch the shapes that broke on Citus before.
package citusrules

import (
	"regexp"
	"sort"
	"strings"

	"github.com/queenside/queenside/schema"
)

// Rule names one rule, as SCALING.md numbers them.
type Rule string

const (
	// WritePruned: an UPDATE or DELETE of a distributed table restricts
	// every distributed table it names by its own partition id, so that it
	// is planned on the shards of its partitions and locks them in an order
	// the caller chose, not as a task per shard run in parallel.
	WritePruned Rule = "R1 a write prunes every relation"
	// LockOneShard: a FOR UPDATE or FOR SHARE statement restricts every
	// distributed table it names by its own partition id (= or = ANY), so
	// that it is planned on one shard: locks across shards are refused.
	LockOneShard Rule = "R2 lock on one shard"
	// NoVolatileInWrite: no volatile function (cursor_head, clock_timestamp,
	// random, gen_random_uuid) anywhere in an UPDATE or DELETE of a
	// distributed table.
	NoVolatileInWrite Rule = "R3 no volatile function in a write"
	// NoStableOfColumn: no stable function of a column in an UPDATE or
	// DELETE of a distributed table, as now() + an interval made from a
	// column is (timestamptz + interval is stable).
	NoStableOfColumn Rule = "R4 no stable function of a column in a write"
	// NoMutableInCase: no now() inside CASE or COALESCE, nor in RETURNING,
	// in an UPDATE or DELETE of a distributed table.
	NoMutableInCase Rule = "R5 no now() in CASE, COALESCE or RETURNING of a write"
	// NoNestedQuery: a function that queries distributed tables is not
	// called inside a statement on a distributed table.
	NoNestedQuery Rule = "R6 no nested distributed query"
	// NoSQLFunction: a LANGUAGE sql function does not touch distributed
	// tables (its parameters cannot be planned by Citus).
	NoSQLFunction Rule = "R7 no SQL-language function on distributed tables"
	// NoForcedGenericPlan: no plan_cache_mode = force_generic_plan.
	NoForcedGenericPlan Rule = "R8 no forced generic plan"
	// NoModifyingCTE: no INSERT inside a WITH, nor an UPDATE or DELETE
	// there unless the statement is on its partitions' shard (R1): Citus
	// runs those as subplans before the query, each on its own.
	NoModifyingCTE Rule = "R9 no modifying CTE run as a subplan"
	// NoNodeEffects: no pg_notify (nor queenside.wake) in a function or
	// statement that touches distributed tables: it would act on the
	// worker that runs it.
	NoNodeEffects Rule = "R10 no node-local effect beside distributed tables"
	// NoQueryIntoElement: a PL/pgSQL assignment to an array element does
	// not query a distributed table: Citus sends the assignment's text,
	// which is no SQL, to the worker. A plain variable takes the value
	// first.
	NoQueryIntoElement Rule = "R11 no query on distributed tables assigned to an array element"
)

// Violation is one rule broken in one place.
type Violation struct {
	Place string // a function's name or a file's
	Rule  Rule
	Text  string // the statement, shortened
}

// queryingFunctions are queenside's functions that read distributed tables.
var queryingFunctions = regexp.MustCompile(`\bqueenside\.(cursor_head|first_offset_at|consumed_to|head_at)\s*\(`)

// distributed are the tables schema.Distribute spreads by partition id.
var distributed = schema.CitusDistributed

var (
	distributedRef = regexp.MustCompile(`\bqueenside\.(` + strings.Join(distributed, "|") + `)\b(?:\s+(?:as\s+)?([a-z_][a-z0-9_]*))?`)
	writeTarget    = regexp.MustCompile(`\b(?:update|delete\s+from)\s+(?:only\s+)?queenside\.(` + strings.Join(distributed, "|") + `)\b`)
	volatileCall   = regexp.MustCompile(`\b(?:queenside\.cursor_head|clock_timestamp|random|gen_random_uuid|timeofday|nextval)\s*\(`)
	lockClause     = regexp.MustCompile(`\bfor\s+(?:no\s+key\s+)?(?:update|share|key\s+share)\b`)
	insertingCTE   = regexp.MustCompile(`\bas\s+(?:not\s+)?(?:materialized\s+)?\(\s*insert\b`)
	modifyingCTE   = regexp.MustCompile(`\bas\s+(?:not\s+)?(?:materialized\s+)?\(\s*(?:update|delete)\b`)
	nodeEffect     = regexp.MustCompile(`\b(?:pg_notify|queenside\.wake)\s*\(`)
	elementAssign  = regexp.MustCompile(`\b[a-z_][a-z0-9_]*\s*\[[^\]]*\]\s*:=`)
	statementStart = regexp.MustCompile(`\b(select|insert|update|delete|with|perform)\b`)
	languageSQL    = regexp.MustCompile(`\blanguage\s+sql\b`)
	loopKeyword    = regexp.MustCompile(`\bloop\b`)
	aliasKeywords  = map[string]bool{"where": true, "join": true, "on": true, "set": true, "using": true, "left": true,
		"inner": true, "cross": true, "order": true, "group": true, "limit": true, "for": true, "returning": true,
		"values": true, "select": true, "default": true, "natural": true, "full": true, "right": true, "union": true}
)

// CheckFunction checks one function definition (CREATE FUNCTION … AS
// $body$ … $body$), naming the place by the function.
func CheckFunction(name, def string) []Violation {
	body := bodyOf(def)
	header := strings.ToLower(strings.Replace(def, body, "", 1)) // its settings are literals: not normalised
	norm := normalise(body)
	var out []Violation
	add := func(r Rule, text string) { out = append(out, Violation{Place: name, Rule: r, Text: shorten(text)}) }
	touches := distributedRef.MatchString(norm)
	if strings.Contains(header, "force_generic_plan") {
		add(NoForcedGenericPlan, "plan_cache_mode = force_generic_plan")
	}
	if touches && languageSQL.MatchString(header) {
		add(NoSQLFunction, "LANGUAGE sql")
	}
	if touches {
		if m := nodeEffect.FindString(norm); m != "" {
			add(NoNodeEffects, m)
		}
	}
	for _, v := range CheckStatements(name, body) {
		if v.Rule == NoNodeEffects && touches {
			continue // said once for the function
		}
		out = append(out, v)
	}
	return dedupe(out)
}

// CheckStatements checks each statement of a text of SQL (a function body
// or a query the store sends).
func CheckStatements(place, sql string) []Violation {
	var out []Violation
	var pieces []string
	for _, stmt := range statements(sql) {
		// A FOR … LOOP's query and the first statement of its body have
		// no semicolon between them; LOOP is no word of SQL's.
		pieces = append(pieces, loopKeyword.Split(normalise(stmt), -1)...)
	}
	for _, s := range pieces {
		loc := statementStart.FindStringIndex(s)
		if loc == nil || !distributedRef.MatchString(s) {
			continue
		}
		if elementAssign.MatchString(s) {
			out = append(out, Violation{Place: place, Rule: NoQueryIntoElement, Text: shorten(s)})
		}
		s = s[loc[0]:]
		add := func(r Rule) { out = append(out, Violation{Place: place, Rule: r, Text: shorten(s)}) }
		if queryingFunctions.MatchString(s) {
			add(NoNestedQuery)
		}
		if insertingCTE.MatchString(s) || modifyingCTE.MatchString(s) && !everyRelationRestricted(s) {
			add(NoModifyingCTE)
		}
		if nodeEffect.MatchString(s) {
			add(NoNodeEffects)
		}
		if writeTarget.MatchString(s) {
			if volatileCall.MatchString(s) {
				add(NoVolatileInWrite)
			}
			if nowInCaseOrCoalesce(s) || nowReturned(s) {
				add(NoMutableInCase)
			}
			if nowPlusColumn(s) {
				add(NoStableOfColumn)
			}
			if !everyRelationRestricted(s) {
				add(WritePruned)
			}
		}
		if lockClause.MatchString(s) && !everyRelationRestricted(s) {
			add(LockOneShard)
		}
	}
	return dedupe(out)
}

// everyRelationRestricted tells whether each distributed table the
// statement names carries its own restriction on its distribution column
// by a value Citus can prune with: a parameter or variable, or an array of
// them (= ANY). A join to another relation's column, unnest's included,
// prunes nothing.
func everyRelationRestricted(s string) bool {
	aliases := relationAliases(s)
	for _, m := range distributedRef.FindAllStringSubmatch(s, -1) {
		table, alias := m[1], m[2]
		qualifier := alias + `\.`
		if alias == "" || aliasKeywords[alias] {
			qualifier = `(?:queenside\.` + table + `\.)?`
		}
		column := "partition_id"
		if table == "partitions" {
			column = "id"
		}
		restriction := regexp.MustCompile(`(?:^|[^a-z0-9_.])` + qualifier + column +
			`\s*=\s*(?:any\s*\(\s*)?(\$\d+|[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?)\s*(?:$|[^a-z0-9_.\[(])`)
		restricted := false
		for _, r := range restriction.FindAllStringSubmatch(s, -1) {
			// A qualified value is a PL/pgSQL record's field (a value
			// the statement is given) unless it names one of the
			// statement's relations, whose column prunes nothing.
			q, _, qualified := strings.Cut(r[1], ".")
			if !qualified || !aliases[q] {
				restricted = true
				break
			}
		}
		if !restricted {
			return false
		}
	}
	return true
}

var aliasAfterRelation = regexp.MustCompile(
	`(?:\bfrom|\bjoin|\bupdate|\busing|,)\s+(?:only\s+|lateral\s+)?[a-z_][a-z0-9_.]*(?:\s*\([^()]*\))?(?:\s+with\s+ordinality)?\s+(?:as\s+)?([a-z_][a-z0-9_]*)|\)\s+(?:as\s+)?([a-z_][a-z0-9_]*)\s*(?:\(|\bon\b|,|\bwhere\b|\bjoin\b|$)|\b([a-z_][a-z0-9_]*)\s+as\s+(?:not\s+)?(?:materialized\s+)?\(`)

// relationAliases gives the names the statement's relations go by: their
// aliases, those of its subqueries and table functions, and its CTEs.
func relationAliases(s string) map[string]bool {
	out := map[string]bool{}
	for _, m := range aliasAfterRelation.FindAllStringSubmatch(s, -1) {
		for _, a := range m[1:] {
			if a != "" && !aliasKeywords[a] {
				out[a] = true
			}
		}
	}
	for _, m := range distributedRef.FindAllStringSubmatch(s, -1) {
		out[m[1]] = true
	}
	return out
}

var (
	nowArithmetic = regexp.MustCompile(`\bnow\(\)\s*[-+]\s*`)
	columnRef     = regexp.MustCompile(`\b[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*\b`)
	callStart     = regexp.MustCompile(`^[a-z_][a-z0-9_.]*\s*\(`)
)

// nowPlusColumn finds now() plus or minus an operand that names a column
// (a qualified name: the statements qualify their columns).
func nowPlusColumn(s string) bool {
	for _, loc := range nowArithmetic.FindAllStringIndex(s, -1) {
		rest := s[loc[1]:]
		operand := rest
		if m := callStart.FindString(rest); m != "" || strings.HasPrefix(rest, "(") {
			depth := 0
			for i, c := range rest {
				if c == '(' {
					depth++
				} else if c == ')' {
					depth--
					if depth == 0 {
						operand = rest[:i+1]
						break
					}
				}
			}
		} else if i := strings.IndexAny(rest, " ,)"); i >= 0 {
			operand = rest[:i]
		}
		// A column read by a subquery is no column reference of the
		// statement's: Citus plans the subquery on its own.
		if columnRef.MatchString(withoutSubqueries(operand)) {
			return true
		}
	}
	return false
}

var returning = regexp.MustCompile(`\breturning\b`)

// nowReturned finds now() in a RETURNING clause: from the word to the end
// of the statement or of the parentheses it is in (a WITH's).
func nowReturned(s string) bool {
	for _, loc := range returning.FindAllStringIndex(s, -1) {
		clause := s[loc[1]:]
		depth := 0
		for i, c := range clause {
			if c == '(' {
				depth++
			} else if c == ')' {
				if depth == 0 {
					clause = clause[:i]
					break
				}
				depth--
			}
		}
		if strings.Contains(clause, "now()") || strings.Contains(clause, "current_timestamp") {
			return true
		}
	}
	return false
}

var subqueryStart = regexp.MustCompile(`\(\s*select\b`)

// withoutSubqueries drops each parenthesised SELECT of s.
func withoutSubqueries(s string) string {
	for {
		loc := subqueryStart.FindStringIndex(s)
		if loc == nil {
			return s
		}
		depth, end := 0, len(s)
		for i := loc[0]; i < len(s); i++ {
			if s[i] == '(' {
				depth++
			} else if s[i] == ')' {
				depth--
				if depth == 0 {
					end = i + 1
					break
				}
			}
		}
		s = s[:loc[0]] + s[end:]
	}
}

// nowInCaseOrCoalesce finds now() inside a CASE … END or a COALESCE(…).
func nowInCaseOrCoalesce(s string) bool {
	for _, span := range spans(s) {
		if strings.Contains(span, "now()") || strings.Contains(span, "current_timestamp") {
			return true
		}
	}
	return false
}

var caseOrCoalesce = regexp.MustCompile(`\bcase\b|\bcoalesce\s*\(`)
var word = regexp.MustCompile(`\b(case|end)\b|[()]`)

// spans gives the text of each CASE … END and COALESCE(…) of s.
func spans(s string) []string {
	var out []string
	for _, loc := range caseOrCoalesce.FindAllStringIndex(s, -1) {
		start := loc[0]
		depth := 0
		isCase := strings.HasPrefix(s[start:], "case")
		for _, t := range word.FindAllStringIndex(s[start:], -1) {
			tok := s[start+t[0] : start+t[1]]
			switch {
			case isCase && tok == "case", !isCase && tok == "(":
				depth++
			case isCase && tok == "end", !isCase && tok == ")":
				depth--
			}
			if depth == 0 && (tok == "end" || tok == ")") {
				out = append(out, s[start:start+t[1]])
				break
			}
		}
	}
	return out
}

// bodyOf gives what lies between a definition's first pair of dollar
// quotes, or the whole text when it has none.
func bodyOf(def string) string {
	open := dollarTag.FindStringIndex(def)
	if open == nil {
		return def
	}
	tag := def[open[0]:open[1]]
	rest := def[open[1]:]
	if end := strings.Index(rest, tag); end >= 0 {
		return rest[:end]
	}
	return rest
}

// statements splits SQL at the semicolons outside quotes, dollar quotes
// and comments.
func statements(sql string) []string {
	var out []string
	start := 0
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; {
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			if j := strings.IndexByte(sql[i:], '\n'); j >= 0 {
				i += j
			} else {
				i = len(sql)
			}
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			if j := strings.Index(sql[i+2:], "*/"); j >= 0 {
				i += j + 3
			} else {
				i = len(sql)
			}
		case c == '\'':
			for i++; i < len(sql) && sql[i] != '\''; i++ {
			}
		case c == '$':
			if loc := dollarTag.FindStringIndex(sql[i:]); loc != nil && loc[0] == 0 {
				tag := sql[i : i+loc[1]]
				if j := strings.Index(sql[i+len(tag):], tag); j >= 0 {
					i += len(tag) + j + len(tag) - 1
				}
			}
		case c == ';':
			out = append(out, sql[start:i])
			start = i + 1
		}
	}
	return append(out, sql[start:])
}

var (
	lineComment  = regexp.MustCompile(`--[^\n]*`)
	blockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	literal      = regexp.MustCompile(`'[^']*'`)
	space        = regexp.MustCompile(`\s+`)
)

// normalise lower-cases a statement, blanks its literals and comments and
// folds its white space.
func normalise(s string) string {
	s = blankDollarQuotes(s)
	s = blockComment.ReplaceAllString(s, " ")
	s = lineComment.ReplaceAllString(s, " ")
	s = literal.ReplaceAllString(s, "''")
	return strings.TrimSpace(space.ReplaceAllString(strings.ToLower(s), " "))
}

var dollarTag = regexp.MustCompile(`\$[A-Za-z_]*\$`)

// blankDollarQuotes replaces each $tag$ … $tag$ string by ”.
func blankDollarQuotes(s string) string {
	var b strings.Builder
	for {
		open := dollarTag.FindStringIndex(s)
		if open == nil {
			return b.String() + s
		}
		tag := s[open[0]:open[1]]
		end := strings.Index(s[open[1]:], tag)
		if end < 0 {
			return b.String() + s
		}
		b.WriteString(s[:open[0]] + "''")
		s = s[open[1]+end+len(tag):]
	}
}

func shorten(s string) string {
	if len(s) > 160 {
		return s[:160] + "…"
	}
	return s
}

func dedupe(vs []Violation) []Violation {
	seen := map[[2]string]bool{}
	var out []Violation
	for _, v := range vs {
		k := [2]string{v.Place, string(v.Rule)}
		if !seen[k] {
			seen[k] = true
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Place != out[j].Place {
			return out[i].Place < out[j].Place
		}
		return out[i].Rule < out[j].Rule
	})
	return out
}
