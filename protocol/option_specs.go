package protocol

import (
	"reflect"
	"strings"
)

// OptionSpec describes one queue option for the tools that write the
// clients' tables of options (protocol/internal/gen). It is read off
// QueueOptions, DefaultQueueOptions and the ranges configure enforces, so
// that an option added there reaches the clients when they are
// regenerated, with nothing else to edit.
type OptionSpec struct {
	Name    string // the wire name, e.g. "leaseSeconds"
	Field   string // the Go field, e.g. "LeaseSeconds"
	Bool    bool   // a flag; otherwise an integer within Min..Max
	Default int64  // 0 or 1 for a flag
	Min     int64
	Max     int64
	// OmitEmpty: the Go encoding leaves the option out when it is zero
	// (false); clients that do the same send the same bytes.
	OmitEmpty bool
}

// OptionSpecs lists the queue options in the order of QueueOptions' fields.
func OptionSpecs() []OptionSpec {
	t := reflect.TypeOf(QueueOptions{})
	defaults := reflect.ValueOf(DefaultQueueOptions())
	specs := make([]OptionSpec, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, flags, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
		s := OptionSpec{Name: name, Field: f.Name, OmitEmpty: strings.Contains(flags, "omitempty")}
		switch f.Type.Kind() {
		case reflect.Bool:
			s.Bool, s.Max = true, 1
			if defaults.Field(i).Bool() {
				s.Default = 1
			}
		default:
			s.Default = defaults.Field(i).Int()
			r := optionRanges[name]
			s.Min, s.Max = r[0], r[1]
		}
		specs = append(specs, s)
	}
	return specs
}

// HasRange reports whether configure enforces a range for the option; the
// generator refuses an integer option without one, which would otherwise
// be documented as 0..0.
func (s OptionSpec) HasRange() bool {
	_, ok := optionRanges[s.Name]
	return s.Bool || ok
}
