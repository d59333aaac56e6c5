package protocol

import "time"

// MaintenanceArgs changes the cluster-wide maintenance state; a nil field
// keeps its value, and no field at all only reads it.
type MaintenanceArgs struct {
	Push *bool
	Pop  *bool
}

// MaintenanceState is the cluster-wide maintenance state: with Push, every
// push is spooled (answered buffered) instead of stored; with Pop, pops
// deliver nothing and answer paused.
type MaintenanceState struct {
	Push      bool       `msgpack:"push" json:"push"`
	Pop       bool       `msgpack:"pop" json:"pop"`
	PushSince *time.Time `msgpack:"pushSince,omitempty" json:"pushSince,omitempty"`
	PopSince  *time.Time `msgpack:"popSince,omitempty" json:"popSince,omitempty"`
}

// DecodeMaintenanceArgs reads maintenance's arguments.
func DecodeMaintenanceArgs(raw []byte) (MaintenanceArgs, error) {
	var a MaintenanceArgs
	err := walkMap(raw, "args", func(d *dec, key string) error {
		switch key {
		case "push", "pop":
			v, err := readBool(d, key)
			if key == "push" {
				a.Push = &v
			} else {
				a.Pop = &v
			}
			return err
		}
		return skipField(d, key)
	})
	return a, err
}
