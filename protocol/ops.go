package protocol

// Operation names of protocol version 1.
const (
	OpHello       = "hello"
	OpPush        = "push"
	OpPop         = "pop"
	OpAck         = "ack"
	OpRenew       = "renew"
	OpRelease     = "release"
	OpTransaction = "transaction"
	OpConfigure   = "configure"
	OpQueues      = "queues"
	OpStats       = "stats"
	OpGroups      = "groups"
	OpSeek        = "seek"
	OpDeleteGroup = "deleteGroup"
	OpDLQ         = "dlq"
	OpDLQReplay   = "dlqReplay"
	OpHealth      = "health"
	OpMaintenance = "maintenance" // revision 1.1
	OpDLQDelete   = "dlqDelete"   // revision 1.2
	OpDLQSummary  = "dlqSummary"  // revision 1.2
)
