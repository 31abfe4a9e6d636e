-- Step limits on Citus. On one PostgreSQL a run's transition gives its limit slots back in the
-- statement that moves the run (src/lifecycle/holds.ts calls stepkey.limit_give_back). On Citus
-- that statement runs on the scope's node, where the limits' partitions (coordinator tables) are
-- not: `stepkey migrate --citus` makes this function answer false, the transition leaves the
-- slots, and stepkey.limit_give_back_distributed gives them back on the coordinator.
CREATE FUNCTION "stepkey"."limit_slots_given_back_inline"() RETURNS boolean
  LANGUAGE sql IMMUTABLE AS $$ SELECT true $$;
--> statement-breakpoint
-- Gives back, on Citus, a run's limit slots — those of step p_step under lease token p_token (the
-- commit that records the step), or with p_step null every slot of a run that is no longer in
-- progress (its transition moved it: a run still executing keeps its slots, across a takeover
-- too) — and, for each slot given back, marks the longest waiter of its limit and partition due.
-- Returns the runs marked due. As in stepkey.limit_give_back, the partition's row is updated (and
-- so locked) before the waiter is looked for: a refused acquire holds that row until its park
-- commits (Citus commits the nodes' part before the coordinator lets its locks go), so a wake-up
-- is never lost between a refusal and its park. Citus runs no locking read across shards: the
-- waiter is read without a lock and marked by its scope and key with its wait rechecked; if it
-- moved meanwhile, the next is tried. Custom plans: Citus routes a statement to one node by the
-- values it is given.
CREATE FUNCTION "stepkey"."limit_give_back_distributed"(p_scope text, p_key text, p_step text, p_token uuid)
  RETURNS TABLE(woken_scope text, woken_key text) LANGUAGE plpgsql
  SET plan_cache_mode = 'force_custom_plan' AS $$
DECLARE
  freed record;
  waiter record;
BEGIN
  FOR freed IN
    DELETE FROM "stepkey"."limit_slots" s
     WHERE s.scope = p_scope AND s.key = p_key
       AND CASE WHEN p_step IS NULL
                THEN NOT EXISTS (SELECT 1 FROM "stepkey"."ledger" l
                                  WHERE l.scope = p_scope AND l.key = p_key AND l.status = 'in_progress')
                ELSE s.step = p_step AND s.token = p_token END
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
