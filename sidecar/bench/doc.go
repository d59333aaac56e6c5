// Package bench is the instrument behind `queenside bench`. It drives a
// sidecar over its socket with many connections and reports, per scenario,
// messages per second, request and push-to-delivery latency, the CPU time
// the sidecar and PostgreSQL spent, and the sidecar's peak memory; first as
// one line per scenario while it runs, then as a table and as JSON.
//
// By default everything measured is started here: a throwaway PostgreSQL
// with the server's durable defaults, and the sidecar as a child process of
// the same binary. Owning both processes is what makes their CPU and memory
// readable from /proc. Against an existing database or sidecar
// (Config.DatabaseURL, Config.Socket) the figures that cannot be observed
// are reported as unknown rather than guessed.
//
// Every answer is checked while measuring: a push item that is not queued,
// an ack item that does not succeed, or a failed request counts as an error,
// and a scenario with any error is reported as failed.
package bench
