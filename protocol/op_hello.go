package protocol

// HelloArgs opens a conversation; it is optional.
type HelloArgs struct {
	Protocol int    `msgpack:"protocol"`
	Client   string `msgpack:"client,omitempty"`
}

// HelloResult describes the sidecar.
type HelloResult struct {
	Protocol      int    `msgpack:"protocol"`
	Server        string `msgpack:"server"`
	Version       string `msgpack:"version"`
	SidecarID     string `msgpack:"sidecarId"`
	MaxFrameBytes int    `msgpack:"maxFrameBytes"`
}

// DecodeHelloArgs reads hello's arguments. A protocol other than Version is
// unsupported.
func DecodeHelloArgs(raw []byte) (HelloArgs, error) {
	var a HelloArgs
	seen := false
	err := walkMap(raw, "args", func(d *dec, key string) error {
		var err error
		switch key {
		case "protocol":
			var v int64
			v, err = readInt(d, key, 0, 1<<31)
			a.Protocol, seen = int(v), true
		case "client":
			a.Client, err = readString(d, key)
		default:
			err = skipField(d, key)
		}
		return err
	})
	if err != nil {
		return a, err
	}
	if !seen {
		return a, invalid("protocol", "is required")
	}
	if a.Protocol != Version {
		return a, Errorf(CodeUnsupported, "protocol %d is not supported; this sidecar speaks %d", a.Protocol, Version)
	}
	return a, nil
}
