-- Step limits on Citus. On one PostgreSQL a run's transition gives its limit slots back in the
-- statement that moves the run (src/lifecycle/holds.ts calls stepkey.limit_give_back). On Citus
-- that statement runs on the scope's node, where the limits' partitions (coordinator tables) are
-- not: `stepkey migrate --citus` makes this function answer false, the transition leaves the
-- slots, and stepkey.limit_give_back_distributed gives them back on the coordinator.
CREATE FUNCTION "stepkey"."limit_slots_given_back_inline"() RETURNS boolean
  LANGUAGE sql IMMUTABLE AS $$ SELECT true $$;
--> statement-breakpoint
-- The lock a step limit's partition is taken from and given back to under, on Citus: a
-- transaction-level advisory lock, which the coordinator holds until its nodes have committed
-- (a row's lock is seen as free once the coordinator's own part commits, before the nodes').
CREATE FUNCTION "stepkey"."limit_partition_lock"(p_limit text, p_partition text) RETURNS void
  LANGUAGE sql AS $$ SELECT pg_advisory_xact_lock(hashtextextended('stepkey.limit' || chr(30) || p_limit || chr(31) || p_partition, 0)) $$;
--> statement-breakpoint
-- Gives back, on Citus, a run's limit slots — those of step p_step under lease token p_token (the
-- commit that records the step), or with p_step null every slot of a run that is not in progress
-- (its transition moved it, or it is gone; a run executing keeps its slots, across a takeover too:
-- its row is locked first, so a claim of it waits for this give-back or this finds it running) —
-- and, for each slot given back, marks the longest waiter of its limit and partition due. Returns
-- the runs marked due. Under the partition's lock (stepkey.limit_partition_lock), which an acquire
-- refused for want of a slot holds until its park has committed on every node: a wake-up is never
-- lost between a refusal and its park. Citus runs no locking read across shards: the waiter is
-- read without a lock and marked by its scope and key with its wait rechecked; if it moved
-- meanwhile, the next is tried. Custom plans: Citus routes a statement to one node by the values
-- it is given.
CREATE FUNCTION "stepkey"."limit_give_back_distributed"(p_scope text, p_key text, p_step text, p_token uuid)
  RETURNS TABLE(woken_scope text, woken_key text) LANGUAGE plpgsql
  SET plan_cache_mode = 'force_custom_plan' AS $$
DECLARE
  run_status text;
  freed record;
  waiter record;
BEGIN
  IF p_step IS NULL THEN
    SELECT l.status INTO run_status FROM "stepkey"."ledger" l
     WHERE l.scope = p_scope AND l.key = p_key FOR SHARE;
    IF run_status = 'in_progress' THEN RETURN; END IF;
  END IF;
  -- The partitions' locks first, in one order: two give-backs of slots in the same partitions
  -- never wait for each other crosswise.
  FOR freed IN
    SELECT DISTINCT s.limit_name, s.partition FROM "stepkey"."limit_slots" s
     WHERE s.scope = p_scope AND s.key = p_key
       AND (p_step IS NULL OR (s.step = p_step AND s.token = p_token))
     ORDER BY s.limit_name, s.partition
  LOOP
    PERFORM "stepkey"."limit_partition_lock"(freed.limit_name, freed.partition);
  END LOOP;
  FOR freed IN
    DELETE FROM "stepkey"."limit_slots" s
     WHERE s.scope = p_scope AND s.key = p_key
       AND (p_step IS NULL OR (s.step = p_step AND s.token = p_token))
    RETURNING s.limit_name, s.partition
  LOOP
    UPDATE "stepkey"."limit_partitions" p SET held = p.held - 1
     WHERE p.limit_name = freed.limit_name AND p.partition = freed.partition;
    FOR waiter IN
      SELECT w.scope, w.key FROM "stepkey"."ledger" w
       WHERE w.status = 'waiting' AND w.wait_kind = 'limit'
         AND w.wait_for = "stepkey"."limit_wait_for"(freed.limit_name, freed.partition)
         AND w.wake_at > now()
       ORDER BY w.updated_at
       LIMIT 4
    LOOP
      RETURN QUERY
        UPDATE "stepkey"."ledger" l SET wake_at = now()
         WHERE l.scope = waiter.scope AND l.key = waiter.key
           AND l.status = 'waiting' AND l.wait_kind = 'limit'
           AND l.wait_for = "stepkey"."limit_wait_for"(freed.limit_name, freed.partition)
           AND l.wake_at > now()
        RETURNING l.scope, l.key;
      EXIT WHEN FOUND;
    END LOOP;
  END LOOP;
END $$;
