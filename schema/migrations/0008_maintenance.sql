-- queenside storage, version 8: maintenance mode and paused queues.
--
-- Both are cluster-wide states that every sidecar on the database applies:
-- each keeps them in memory, reads them again when the wake channel says
-- "!control" (a name no queue can have) and every few seconds besides, so a
-- change reaches every sidecar within two seconds even without a listener.
-- Sidecars of version 7 ignore both.

-- One row: whether pushes go to the sidecars' spools instead of here (push)
-- and whether pops deliver (pop), with when each was turned on.
CREATE TABLE queenside.maintenance (
    only_row   boolean     PRIMARY KEY DEFAULT true CHECK (only_row),
    push       boolean     NOT NULL DEFAULT false,
    pop        boolean     NOT NULL DEFAULT false,
    push_since timestamptz,
    pop_since  timestamptz
);
INSERT INTO queenside.maintenance DEFAULT VALUES;

-- A queue whose consumption is paused is delivered by no group's pop.
ALTER TABLE queenside.queues ADD COLUMN consumption_paused boolean NOT NULL DEFAULT false;
