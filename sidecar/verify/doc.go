// Package verify is the instrument behind `queenside verify`: an end-to-end
// check that queenside moves every event exactly once and in order through
// a pipeline of queues while processes die around it.
//
// A run starts a throwaway PostgreSQL with its durable defaults (or, with
// --citus, a Citus coordinator and workers, the schema distributed over
// them) and several sidecars (child processes of the same binary) on one
// database, then:
//
//   - the loader pushes sequence-numbered events into queue 1 over many
//     partitions at a fixed rate, each with a deterministic transaction id,
//     one producer per sidecar (as an application in each pod talks to its
//     own sidecar), each partition always through the same producer;
//   - each stage consumes queue i with leases, through a randomly chosen
//     sidecar, and pushes every event on to queue i+1 in a `transaction`
//     that also acks what it consumed, with a transaction id derived from
//     the consumed message, so that a retried step is a duplicate;
//   - the checker consumes the last queue and acks with `ack`;
//   - faults are injected on a schedule: SIGKILL and SIGTERM of sidecars
//     (restarted on the same spool directory), immediate stops and
//     freezes (SIGSTOP) of PostgreSQL or of a Citus worker, a sidecar cut
//     off PostgreSQL by a network partition (pushes are spooled and
//     replayed), a consumer that dies holding its leases, and a consumer
//     that lets its leases expire. Each fault on a process or the network
//     is measured: the longest a push waited for its answer, the pushes
//     answered buffered, and after a stall or a partition how soon the
//     spools drained and the partitions' rows could be locked again.
//
// Every consumer, stages and checker alike, records what it is delivered in
// an auditor for its queue, so a fault is pinned to the stage that let it
// through. The definitions, per queue and per partition:
//
//   - a redelivery is a delivery of an offset already delivered before; it
//     must carry the same event (else it is a mismatch), and it is expected
//     after a lease lapses;
//   - a duplicate is a second stored message for one sequence number: a
//     delivery at a new offset of an event already delivered at another;
//   - an order violation is a message whose sequence number is lower than
//     that of a message at a lower offset of its partition, or the first
//     delivery of an offset before every lower offset was delivered;
//   - a gap is a sequence number the loader pushed that no offset of the
//     partition carried once the run has drained.
//
// The run fails, and its report lists the offending partitions and
// sequence numbers, on any duplicate, gap, order violation, mismatch, on an
// event that was never pushed, on a transaction or ack that succeeded
// after its lease had expired, on abandoned messages that were never
// delivered again, or when it does not drain in time.
package verify
