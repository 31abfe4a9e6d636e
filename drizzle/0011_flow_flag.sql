ALTER TABLE "stepkey"."ledger" ADD COLUMN "flow" boolean DEFAULT true NOT NULL;--> statement-breakpoint
-- Guarantee: a run that holds a queue entry or a limit slot is marked flow = true before
-- it can end, whoever wrote the entry or the slot (an older release included, and a slot
-- taken again through its ON CONFLICT update), so the triggers below, which skip rows
-- marked false, still give back what it holds. The update matches nothing, and locks
-- nothing, for a row already marked.
CREATE FUNCTION "stepkey"."flow_mark"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE "stepkey"."ledger" SET flow = true
   WHERE scope = NEW.scope AND key = NEW.key AND NOT flow;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER "queue_entries_flow_mark" AFTER INSERT ON "stepkey"."queue_entries"
  FOR EACH ROW EXECUTE FUNCTION "stepkey"."flow_mark"();
--> statement-breakpoint
CREATE TRIGGER "limit_slots_flow_mark" AFTER INSERT OR UPDATE ON "stepkey"."limit_slots"
  FOR EACH ROW EXECUTE FUNCTION "stepkey"."flow_mark"();
--> statement-breakpoint
-- The flow-control triggers of 0007-0009, now only for rows that may hold a slot: the end
-- of a run marked flow = false (most runs) costs no trigger call.
DROP TRIGGER "ledger_flow_release" ON "stepkey"."ledger";
--> statement-breakpoint
CREATE TRIGGER "ledger_flow_release" AFTER UPDATE OF status ON "stepkey"."ledger"
  FOR EACH ROW WHEN (OLD.kind = 'run' AND NEW.flow AND OLD.status IS DISTINCT FROM NEW.status AND NEW.status <> 'in_progress')
  EXECUTE FUNCTION "stepkey"."flow_release"();
--> statement-breakpoint
DROP TRIGGER "ledger_limit_release" ON "stepkey"."ledger";
--> statement-breakpoint
CREATE TRIGGER "ledger_limit_release" AFTER UPDATE OF status ON "stepkey"."ledger"
  FOR EACH ROW WHEN (OLD.kind = 'run' AND NEW.flow AND OLD.status IS DISTINCT FROM NEW.status AND NEW.status <> 'in_progress')
  EXECUTE FUNCTION "stepkey"."limit_release"();
--> statement-breakpoint
DROP TRIGGER "ledger_flow_requeue" ON "stepkey"."ledger";
--> statement-breakpoint
CREATE TRIGGER "ledger_flow_requeue" BEFORE UPDATE OF status ON "stepkey"."ledger"
  FOR EACH ROW WHEN (OLD.kind = 'run' AND OLD.flow AND OLD.status = 'failed' AND NEW.status = 'in_progress')
  EXECUTE FUNCTION "stepkey"."flow_requeue"();
--> statement-breakpoint
DROP TRIGGER "ledger_flow_forget" ON "stepkey"."ledger";
--> statement-breakpoint
CREATE TRIGGER "ledger_flow_forget" AFTER DELETE ON "stepkey"."ledger"
  FOR EACH ROW WHEN (OLD.kind = 'run' AND OLD.flow)
  EXECUTE FUNCTION "stepkey"."flow_forget"();
