-- queenside storage, version 4: seek.

-- seek moves a group's cursor in one partition of a queue, or in all of them
-- (p_partition NULL), to the first retained message ('beginning'), past the
-- last one ('end'), or to the first message committed at or after p_at
-- ('time'), which resolves in each partition on its own. The group's leases
-- on the partitions it moves are released, and what the cursor remembered
-- of deliveries and failures is forgotten: from there on, every message is
-- delivered as if for the first time, with its whole retry budget. Cursors
-- are locked in partition order, as pop and ack lock them.
CREATE FUNCTION queenside.seek(p_group bigint, p_partition bigint, p_to text, p_at timestamptz)
RETURNS TABLE (partition_name text, cursor_offset bigint)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_to NOT IN ('beginning', 'end', 'time') THEN
        RAISE EXCEPTION 'seek to %: want beginning, end or time', p_to USING ERRCODE = '22023';
    END IF;
    -- A caller's cached group id may name a group deleted since: it looks
    -- the group up again on no_data_found.
    PERFORM 1 FROM queenside.groups g WHERE g.id = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'group % does not exist', p_group USING ERRCODE = 'P0002';
    END IF;
    RETURN QUERY
    WITH locked AS (
        SELECT cu.partition_id AS pid
          FROM queenside.cursors cu
         WHERE cu.group_id = p_group AND (p_partition IS NULL OR cu.partition_id = p_partition)
         ORDER BY cu.partition_id
           FOR UPDATE),
    target AS (
        SELECT l.pid, p.name,
               CASE p_to WHEN 'end' THEN p.next_offset
                         WHEN 'beginning' THEN queenside.first_offset_at(l.pid, NULL)
                         ELSE queenside.first_offset_at(l.pid, p_at) END AS pos
          FROM locked l JOIN queenside.partitions p ON p.id = l.pid),
    moved AS (
        UPDATE queenside.cursors cu
           SET committed = t.pos, head_at = queenside.cursor_head(t.pid, t.pos),
               lease_id = NULL, lease_from = NULL, lease_to = NULL, lease_expires_at = NULL, lease_done = NULL,
               delivered_to = '{}', fail_offsets = '{}', fail_counts = '{}'
          FROM target t
         WHERE cu.group_id = p_group AND cu.partition_id = t.pid
        RETURNING t.name, t.pos)
    SELECT m.name, m.pos FROM moved m ORDER BY m.name;
    -- Pops waiting on the queue look again: a cursor moved back has work.
    PERFORM queenside.wake(q.name) FROM queenside.groups g JOIN queenside.queues q ON q.id = g.queue_id
     WHERE g.id = p_group;
END;
$$;
