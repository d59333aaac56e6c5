package protocol

// QueueOptions are a queue's settings. configure replaces all of them: an
// omitted option returns to its default.
type QueueOptions struct {
	LeaseSeconds              int `msgpack:"leaseSeconds" json:"leaseSeconds"`
	RetryLimit                int `msgpack:"retryLimit" json:"retryLimit"`
	DedupWindowSeconds        int `msgpack:"dedupWindowSeconds" json:"dedupWindowSeconds"`
	RetentionSeconds          int `msgpack:"retentionSeconds" json:"retentionSeconds"`
	CompletedRetentionSeconds int `msgpack:"completedRetentionSeconds" json:"completedRetentionSeconds"`
	DelaySeconds              int `msgpack:"delaySeconds" json:"delaySeconds"`
	// ConsumptionPaused stops every group's pops of the queue from
	// delivering until it is false again (revision 1.1).
	ConsumptionPaused bool `msgpack:"consumptionPaused,omitempty" json:"consumptionPaused"`
	// EncryptPayloads seals the payloads of messages pushed while it is
	// true, under the sidecar's writing key (revision 1.1).
	EncryptPayloads bool `msgpack:"encryptPayloads,omitempty" json:"encryptPayloads"`
	// MaxDeliveries, when above 0, dead-letters a message delivered that
	// many times under a lease without being acked (revision 1.2); 0 keeps
	// the seed's rule that a crash charges nothing.
	MaxDeliveries int `msgpack:"maxDeliveries,omitempty" json:"maxDeliveries"`
}

// DefaultQueueOptions are the options of a queue created by its first push.
func DefaultQueueOptions() QueueOptions {
	return QueueOptions{
		LeaseSeconds:              60,
		RetryLimit:                3,
		DedupWindowSeconds:        3600,
		RetentionSeconds:          0,
		CompletedRetentionSeconds: 86400,
		DelaySeconds:              0,
	}
}

// optionRanges bounds each option; a value outside is invalid_argument.
var optionRanges = map[string][2]int64{
	"leaseSeconds":              {1, 86400},
	"retryLimit":                {0, 1000},
	"dedupWindowSeconds":        {0, 30 * 86400},
	"retentionSeconds":          {0, 10 * 365 * 86400},
	"completedRetentionSeconds": {0, 10 * 365 * 86400},
	"delaySeconds":              {0, 7 * 86400},
	// A cursor remembers its last thousand leases (queenside.pop_from).
	"maxDeliveries": {0, 1000},
}

// ConfigureArgs sets a queue's options, creating the queue if needed.
type ConfigureArgs struct {
	Queue   string       `msgpack:"queue"`
	Options QueueOptions `msgpack:"options"`
}

// QueueInfo describes one queue in the queues listing, and is configure's result.
type QueueInfo struct {
	Queue      string       `msgpack:"queue"`
	Partitions int          `msgpack:"partitions"`
	Options    QueueOptions `msgpack:"options"`
}

// ConfigureResult is the result of configure: the options now in force.
type ConfigureResult struct {
	Queue   string       `msgpack:"queue"`
	Options QueueOptions `msgpack:"options"`
}

// QueuesResult lists every queue.
type QueuesResult struct {
	Queues []QueueInfo `msgpack:"queues"`
}

// QueueArgs names one queue (stats).
type QueueArgs struct {
	Queue string `msgpack:"queue"`
}

// StatsResult describes one queue's partitions and the groups reading them.
type StatsResult struct {
	Queue      string           `msgpack:"queue"`
	Partitions []PartitionStats `msgpack:"partitions"`
}

// PartitionStats describes one partition. HeadOffset is the offset the next
// message will get; Messages counts those still retained.
type PartitionStats struct {
	Partition  string       `msgpack:"partition"`
	HeadOffset int64        `msgpack:"headOffset"`
	Messages   int64        `msgpack:"messages"`
	Groups     []GroupStats `msgpack:"groups"`
}

// GroupStats is one group's position in a partition.
type GroupStats struct {
	Group  string `msgpack:"group"`
	Cursor int64  `msgpack:"cursor"`
	Lag    int64  `msgpack:"lag"`
	Leased bool   `msgpack:"leased"`
}

// DecodeConfigureArgs reads configure's arguments, filling omitted options
// with their defaults.
func DecodeConfigureArgs(raw []byte) (ConfigureArgs, error) {
	a := ConfigureArgs{Options: DefaultQueueOptions()}
	err := walkMap(raw, "args", func(d *dec, key string) error {
		switch key {
		case "queue":
			return readQueue(d, &a.Queue)
		case "options":
			return walkMapFrom(d, "options", func(d *dec, key string) error {
				switch key {
				case "consumptionPaused":
					v, err := readBool(d, "options."+key)
					a.Options.ConsumptionPaused = v
					return err
				case "encryptPayloads":
					v, err := readBool(d, "options."+key)
					a.Options.EncryptPayloads = v
					return err
				}
				target := a.Options.field(key)
				if target == nil {
					return skipField(d, key)
				}
				r := optionRanges[key]
				v, err := readInt(d, "options."+key, r[0], r[1])
				*target = int(v)
				return err
			})
		}
		return skipField(d, key)
	})
	if err == nil && a.Queue == "" {
		err = invalid("queue", "is required")
	}
	return a, err
}

func (o *QueueOptions) field(name string) *int {
	switch name {
	case "leaseSeconds":
		return &o.LeaseSeconds
	case "retryLimit":
		return &o.RetryLimit
	case "dedupWindowSeconds":
		return &o.DedupWindowSeconds
	case "retentionSeconds":
		return &o.RetentionSeconds
	case "completedRetentionSeconds":
		return &o.CompletedRetentionSeconds
	case "delaySeconds":
		return &o.DelaySeconds
	case "maxDeliveries":
		return &o.MaxDeliveries
	}
	return nil
}

// DecodeQueueArgs reads arguments that name one required queue.
func DecodeQueueArgs(raw []byte) (QueueArgs, error) {
	var a QueueArgs
	err := walkMap(raw, "args", func(d *dec, key string) error {
		if key == "queue" {
			return readQueue(d, &a.Queue)
		}
		return skipField(d, key)
	})
	if err == nil && a.Queue == "" {
		err = invalid("queue", "is required")
	}
	return a, err
}

func readQueue(d *dec, dst *string) error {
	s, err := readString(d, "queue")
	if err != nil {
		return err
	}
	if err := CheckName("queue", s); err != nil {
		return err
	}
	*dst = s
	return nil
}
