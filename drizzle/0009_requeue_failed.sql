DROP INDEX "stepkey"."queue_entries_waiting_idx";--> statement-breakpoint
ALTER TABLE "stepkey"."queue_entries" ADD COLUMN "failed" boolean DEFAULT false NOT NULL;--> statement-breakpoint
CREATE INDEX "queue_entries_waiting_idx" ON "stepkey"."queue_entries" USING btree ("queue","partition","priority" DESC NULLS LAST,"seq") WHERE not "stepkey"."queue_entries"."holding" and not "stepkey"."queue_entries"."failed";--> statement-breakpoint
-- Flow control, as in 0007, except for a run that fails: it gives its slot back but
-- keeps its entry (failed), so that whatever resumes it puts it back in line for a slot
-- (flow_requeue below). A run that completes, errs or is cancelled leaves its queue; a
-- run that parks (timer, event, child, review) keeps its place but not its slot.
CREATE OR REPLACE FUNCTION "stepkey"."flow_release"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status = 'waiting' THEN
    IF NEW.wait_kind <> 'slot' THEN
      UPDATE "stepkey"."queue_entries" SET holding = false, granted_token = null
       WHERE scope = NEW.scope AND key = NEW.key AND holding;
    END IF;
  ELSIF NEW.status = 'failed' THEN
    UPDATE "stepkey"."queue_entries" SET holding = false, granted_token = null, failed = true
     WHERE scope = NEW.scope AND key = NEW.key;
  ELSE
    DELETE FROM "stepkey"."queue_entries" WHERE scope = NEW.scope AND key = NEW.key;
  END IF;
  RETURN NULL;
END $$;
--> statement-breakpoint
-- Guarantee: a failed run on a queue never runs again without a slot. Every write that
-- resumes a failed run sets it in progress (a claim's takeover, an operator's resume);
-- for a run with a failed queue entry this trigger turns that write, in the same
-- statement, into a park waiting for a slot (wait_kind 'slot', no lease), and puts the
-- entry back in line, at its old place. Only the queue's dispatch starts it then.
CREATE FUNCTION "stepkey"."flow_requeue"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  entry_queue text;
BEGIN
  UPDATE "stepkey"."queue_entries" SET failed = false
   WHERE scope = NEW.scope AND key = NEW.key AND failed
  RETURNING queue INTO entry_queue;
  IF FOUND THEN
    NEW.status := 'waiting';
    NEW.wait_kind := 'slot';
    NEW.wait_step := 'queue:' || entry_queue;
    NEW.wait_for := entry_queue;
    NEW.wake_at := null;
    NEW.lease_token := null;
    NEW.locked_until := null;
    NEW.expires_at := null;
  END IF;
  RETURN NEW;
END $$;
--> statement-breakpoint
CREATE TRIGGER "ledger_flow_requeue" BEFORE UPDATE OF status ON "stepkey"."ledger"
  FOR EACH ROW WHEN (OLD.kind = 'run' AND OLD.status = 'failed' AND NEW.status = 'in_progress')
  EXECUTE FUNCTION "stepkey"."flow_requeue"();
--> statement-breakpoint
-- A run's row that is deleted (purged or forgotten once expired, or given up) takes its
-- queue entry with it, so a key used again starts a new run with a new entry.
CREATE FUNCTION "stepkey"."flow_forget"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM "stepkey"."queue_entries" WHERE scope = OLD.scope AND key = OLD.key;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER "ledger_flow_forget" AFTER DELETE ON "stepkey"."ledger"
  FOR EACH ROW WHEN (OLD.kind = 'run')
  EXECUTE FUNCTION "stepkey"."flow_forget"();
