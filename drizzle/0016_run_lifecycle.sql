DROP INDEX "stepkey"."ledger_runs_unsuccessful_idx";--> statement-breakpoint
DROP INDEX "stepkey"."ledger_runs_unsuccessful_workflow_idx";--> statement-breakpoint
ALTER TABLE "stepkey"."ledger" ADD COLUMN "wait_until" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "stepkey"."ledger" ADD COLUMN "deadline_at" timestamp with time zone;--> statement-breakpoint
CREATE INDEX "ledger_deadlines_idx" ON "stepkey"."ledger" USING btree ("deadline_at") WHERE "stepkey"."ledger"."deadline_at" is not null and "stepkey"."ledger"."status" in ('in_progress', 'waiting', 'failed');--> statement-breakpoint
CREATE INDEX "ledger_runs_unsuccessful_idx" ON "stepkey"."ledger" USING btree ("created_at","scope","key") WHERE "stepkey"."ledger"."kind" = 'run' and ("stepkey"."ledger"."status" = 'failed' or "stepkey"."ledger"."status" = 'cancelled' or "stepkey"."ledger"."status" = 'deadline_exceeded' or ("stepkey"."ledger"."status" = 'completed' and not "stepkey"."ledger"."outcome_ok"));--> statement-breakpoint
CREATE INDEX "ledger_runs_unsuccessful_workflow_idx" ON "stepkey"."ledger" USING btree ("name","created_at","scope","key") WHERE "stepkey"."ledger"."kind" = 'run' and ("stepkey"."ledger"."status" = 'failed' or "stepkey"."ledger"."status" = 'cancelled' or "stepkey"."ledger"."status" = 'deadline_exceeded' or ("stepkey"."ledger"."status" = 'completed' and not "stepkey"."ledger"."outcome_ok"));
--> statement-breakpoint
-- A run's life is written by stepkey's lifecycle module alone (src/lifecycle): each transition
-- gives back what the run holds (its queue slot or entry, its limit slots) in the statement that
-- moves it, so no trigger reaches from a run's row into other rows — and a table with triggers
-- cannot be distributed by scope (Citus). The triggers of 0007–0014 go, with their functions:
-- flow_release (a run's end or park gave its queue slot back), limit_release (its limit slots),
-- flow_forget (a deleted run took its queue entry), flow_mark (an entry or a slot marked its run as
-- one that may hold them) and flow_resume_guard (a failed queued run resumed into progress refused).
-- stepkey.limit_give_back stays: the transitions call it. Stop every process of an earlier stepkey
-- before migrating: their writes relied on the triggers.
DROP TRIGGER IF EXISTS "ledger_flow_release" ON "stepkey"."ledger";--> statement-breakpoint
DROP TRIGGER IF EXISTS "ledger_limit_release" ON "stepkey"."ledger";--> statement-breakpoint
DROP TRIGGER IF EXISTS "ledger_flow_forget" ON "stepkey"."ledger";--> statement-breakpoint
DROP TRIGGER IF EXISTS "ledger_flow_resume_guard" ON "stepkey"."ledger";--> statement-breakpoint
DROP TRIGGER IF EXISTS "queue_entries_flow_mark" ON "stepkey"."queue_entries";--> statement-breakpoint
DROP TRIGGER IF EXISTS "limit_slots_flow_mark" ON "stepkey"."limit_slots";--> statement-breakpoint
DROP FUNCTION IF EXISTS "stepkey"."flow_release"();--> statement-breakpoint
DROP FUNCTION IF EXISTS "stepkey"."limit_release"();--> statement-breakpoint
DROP FUNCTION IF EXISTS "stepkey"."flow_forget"();--> statement-breakpoint
DROP FUNCTION IF EXISTS "stepkey"."flow_mark"();--> statement-breakpoint
DROP FUNCTION IF EXISTS "stepkey"."flow_resume_guard"();--> statement-breakpoint
-- A run may end as deadline_exceeded: final, with its outcome stored, like a cancellation.
CREATE OR REPLACE FUNCTION "stepkey"."ledger_row_ok"(
  p_scope text, p_key text, kind text, status text, lease_token uuid, locked_until timestamptz,
  outcome text, outcome_ok boolean, version integer, input text, wait_kind text, expires_at timestamptz
) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF kind IN ('request', 'run', 'effect')
     AND status IN ('in_progress', 'waiting', 'completed', 'failed', 'cancelled', 'deadline_exceeded')
     AND (wait_kind IS NULL OR wait_kind IN ('timer', 'event', 'child', 'slot', 'limit', 'review'))
     AND NOT (status = 'in_progress' AND (lease_token IS NULL OR locked_until IS NULL))
     AND (status IN ('completed', 'cancelled', 'deadline_exceeded')) = (outcome IS NOT NULL AND outcome_ok IS NOT NULL)
     AND NOT (status = 'waiting' AND (kind <> 'run' OR lease_token IS NOT NULL OR locked_until IS NOT NULL OR wait_kind IS NULL OR expires_at IS NOT NULL))
     AND NOT (kind <> 'run' AND (version IS NOT NULL OR input IS NOT NULL)) THEN
    RETURN true;
  END IF;
  IF kind NOT IN ('request', 'run', 'effect') THEN
    IF kind = 'step' THEN
      RAISE EXCEPTION 'stepkey.ledger (%, %): steps are recorded in stepkey.steps since migration 0013; a process of an earlier stepkey is still running against this database: stop it', p_scope, p_key
        USING ERRCODE = '23514', CONSTRAINT = 'ledger_row_check', SCHEMA = 'stepkey', TABLE = 'ledger';
    END IF;
    RAISE EXCEPTION 'stepkey.ledger (%, %): kind ''%'' is not request, run or effect', p_scope, p_key, kind
      USING ERRCODE = '23514', CONSTRAINT = 'ledger_row_check', SCHEMA = 'stepkey', TABLE = 'ledger';
  END IF;
  IF status NOT IN ('in_progress', 'waiting', 'completed', 'failed', 'cancelled') THEN
    RAISE EXCEPTION 'stepkey.ledger (%, %): status ''%'' is not in_progress, waiting, completed, failed, cancelled or deadline_exceeded', p_scope, p_key, status
      USING ERRCODE = '23514', CONSTRAINT = 'ledger_row_check', SCHEMA = 'stepkey', TABLE = 'ledger';
  END IF;
  IF wait_kind NOT IN ('timer', 'event', 'child', 'slot', 'limit', 'review') THEN
    RAISE EXCEPTION 'stepkey.ledger (%, %): wait_kind ''%'' is not timer, event, child, slot, limit or review', p_scope, p_key, wait_kind
      USING ERRCODE = '23514', CONSTRAINT = 'ledger_row_check', SCHEMA = 'stepkey', TABLE = 'ledger';
  END IF;
  IF status = 'in_progress' AND (lease_token IS NULL OR locked_until IS NULL) THEN
    RAISE EXCEPTION 'stepkey.ledger (%, %): a row in progress needs a lease (lease_token and locked_until)', p_scope, p_key
      USING ERRCODE = '23514', CONSTRAINT = 'ledger_row_check', SCHEMA = 'stepkey', TABLE = 'ledger';
  END IF;
  IF (status IN ('completed', 'cancelled', 'deadline_exceeded')) <> (outcome IS NOT NULL AND outcome_ok IS NOT NULL) THEN
    RAISE EXCEPTION 'stepkey.ledger (%, %): a % row % an outcome (outcome and outcome_ok)', p_scope, p_key, status,
      CASE WHEN status IN ('completed', 'cancelled', 'deadline_exceeded') THEN 'needs' ELSE 'cannot have' END
      USING ERRCODE = '23514', CONSTRAINT = 'ledger_row_check', SCHEMA = 'stepkey', TABLE = 'ledger';
  END IF;
  IF status = 'waiting' AND (kind <> 'run' OR lease_token IS NOT NULL OR locked_until IS NOT NULL OR wait_kind IS NULL OR expires_at IS NOT NULL) THEN
    RAISE EXCEPTION 'stepkey.ledger (%, %): a waiting row is a run with a wait_kind, no lease and no expiry', p_scope, p_key
      USING ERRCODE = '23514', CONSTRAINT = 'ledger_row_check', SCHEMA = 'stepkey', TABLE = 'ledger';
  END IF;
  IF kind <> 'run' AND (version IS NOT NULL OR input IS NOT NULL) THEN
    RAISE EXCEPTION 'stepkey.ledger (%, %): only a run carries a version and an input (this row is a %)', p_scope, p_key, kind
      USING ERRCODE = '23514', CONSTRAINT = 'ledger_row_check', SCHEMA = 'stepkey', TABLE = 'ledger';
  END IF;
  RETURN true;
END $$;
--> statement-breakpoint
-- A wait recorded before this migration: its own time was its wake time.
UPDATE "stepkey"."ledger" SET wait_until = wake_at WHERE wait_kind IS NOT NULL AND wake_at IS NOT NULL;
