-- queenside storage, version 20: how far each spool segment is replayed,
-- recorded in the transaction that stores the replayed batch.
--
-- The spool notes its replay progress in a file beside the segment, after
-- the batch committed. When the spool's disk is full that note fails, and
-- a crash before it is written again replayed the batch a second time: on
-- a queue without deduplication, stored twice. A row here commits with
-- the batch or not at all; the replay reads it first and skips what it
-- covers, whatever failed between the commit and the file. The segment is
-- named by its spool identity, which goes with its file when another
-- sidecar adopts it. A row goes when its segment is retired, and rows of
-- segments no sidecar touched for 30 days (a pod whose volume is gone)
-- with the next retirement.

CREATE TABLE queenside.spool_progress (
    segment     uuid        NOT NULL,
    replayed_to bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT spool_progress_pkey PRIMARY KEY (segment)
);
