-- An enqueue's slot at once, decided in the statement that adds its entry (one PostgreSQL:
-- src/flow/sql/enqueue.ts), where an earlier release took a statement of its own to lock the queue.
-- A statement's snapshot is taken before any lock it waits for; each query of a volatile function
-- takes a snapshot of its own, so the decision below, read after the queue's locks, sees every slot
-- granted and every entry added before them.
-- Guarantee: the same as a dispatch's (src/lifecycle/dispatch.ts) — true only under both of the
-- queue's locks (its advisory lock, then its row's), on a queue without a rate, when no run is due
-- in line (by the time read after the wait: the dispatch would start that one first) and a slot of
-- the queue and of the partition is free; slots held never exceed the queue's row. The locks are
-- taken only if a slot seemed free, and then noted in the transaction (stepkey.dispatching) for a
-- guarded dispatch sent after the entry; a queue that seemed full takes no lock, its entry waits,
-- and its enqueue dispatches the queue after its commit.
CREATE FUNCTION "stepkey"."slot_at_once"(p_queue text, p_partition text, p_offset_ms float8)
  RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM stepkey.queues s
                  WHERE s.name = p_queue
                    AND (SELECT count(*) FROM stepkey.queue_entries h WHERE h.queue = p_queue AND h.holding) < s.concurrency) THEN
    RETURN false;
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended('stepkey.queue' || chr(30) || p_queue, 0));
  PERFORM 1 FROM stepkey.queues WHERE name = p_queue FOR UPDATE;
  -- The dispatch after the entry is planned once per connection (src/lifecycle/dispatch.ts, Plans).
  PERFORM set_config('stepkey.dispatching', p_queue, true), set_config('plan_cache_mode', 'force_generic_plan', true);
  RETURN EXISTS (
           SELECT 1 FROM stepkey.queues s
            WHERE s.name = p_queue AND s.rate_limit IS NULL
              AND (SELECT count(*) FROM stepkey.queue_entries h WHERE h.queue = p_queue AND h.holding) < s.concurrency
              AND (s.per_partition IS NULL
                   OR (SELECT count(*) FROM stepkey.queue_entries h
                        WHERE h.queue = p_queue AND h.partition = p_partition AND h.holding) < s.per_partition))
     AND NOT EXISTS (
           SELECT 1 FROM stepkey.queue_entries w
            WHERE w.queue = p_queue AND NOT w.holding AND NOT w.failed
              AND w.not_before <= clock_timestamp() + p_offset_ms * interval '1 millisecond');
END $$;
--> statement-breakpoint
-- Whether a queue is worth a dispatch (one PostgreSQL: src/lifecycle/dispatch.ts), in one statement
-- without a transaction of its own: first a wait until no transaction holds the queue's lock (a
-- shared hold: a barrier), then a look in a snapshot taken after it, which sees every entry added
-- and slot given back by whoever held it. Guarantee: false only if, once the lock's holders have
-- committed, no run due by its entry waits in line while a slot is free (one not due yet is started
-- by a sweep once due, as a dispatch now would not start it); any change after the barrier is dispatched
-- by whoever makes it (an entry added or a slot given back is always followed by a dispatch under
-- the lock, a swap that starts a run in it, or this same look after its commit).
CREATE FUNCTION "stepkey"."worth_dispatching"(p_queue text, p_offset_ms float8)
  RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM pg_advisory_xact_lock_shared(hashtextextended('stepkey.queue' || chr(30) || p_queue, 0));
  -- An entry not due yet (a delay) is not worth a dispatch; its time comes with a sweep.
  RETURN EXISTS (SELECT 1 FROM stepkey.queue_entries e
                  WHERE e.queue = p_queue AND NOT e.holding AND NOT e.failed
                    AND e.not_before <= clock_timestamp() + p_offset_ms * interval '1 millisecond')
     AND EXISTS (SELECT 1 FROM stepkey.queues s
                  WHERE s.name = p_queue
                    AND (SELECT count(*) FROM stepkey.queue_entries h WHERE h.queue = p_queue AND h.holding) < s.concurrency);
END $$;
