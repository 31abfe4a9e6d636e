CREATE TABLE "stepkey"."steps" (
	"scope" text NOT NULL,
	"key" text NOT NULL,
	"run_key" text NOT NULL,
	"name" text NOT NULL,
	"outcome" text NOT NULL,
	"outcome_ok" boolean NOT NULL,
	"attempts" integer NOT NULL,
	"seq" integer,
	"completed_at" timestamp with time zone NOT NULL,
	CONSTRAINT "steps_pkey" PRIMARY KEY("scope","key")
);
--> statement-breakpoint
CREATE INDEX "steps_run_idx" ON "stepkey"."steps" USING btree ("scope","run_key");--> statement-breakpoint
-- No write to the ledger from here to this migration's commit: a step that a process of an
-- earlier release commits is either moved below or refused by the row check that commits with
-- it (reads go on meanwhile).
LOCK TABLE "stepkey"."ledger" IN EXCLUSIVE MODE;
--> statement-breakpoint
-- Guarantee: every finished step of a run keeps its record across the upgrade — moved, in one
-- statement, from the ledger to stepkey.steps with its key, run, name, outcome, attempts and
-- place. A row of kind 'step' that is not a run's finished step (unfinished, or claimed under
-- a key that is not a run through the ledger API) stays in the ledger, as it was.
WITH "moved" AS (
  DELETE FROM "stepkey"."ledger" s
   WHERE s."kind" = 'step' AND s."status" = 'completed' AND s."name" IS NOT NULL
     AND EXISTS (SELECT 1 FROM "stepkey"."ledger" r WHERE r."scope" = s."scope" AND r."key" = s."parent_key" AND r."kind" = 'run')
  RETURNING s."scope", s."key", s."parent_key", s."name", s."outcome", s."outcome_ok", s."attempts", s."seq",
            coalesce(s."completed_at", s."updated_at") AS "completed_at"
)
INSERT INTO "stepkey"."steps" ("scope", "key", "run_key", "name", "outcome", "outcome_ok", "attempts", "seq", "completed_at")
SELECT "scope", "key", "parent_key", "name", "outcome", "outcome_ok", "attempts", "seq", "completed_at" FROM "moved";
--> statement-breakpoint
-- Guarantee: no step is recorded in the ledger any more. A process of an earlier stepkey that
-- still runs would write its step rows there, where this release does not look (and two
-- holders of one step would not meet on one primary key): its step's transaction fails, business
-- writes included, instead (the ledger_row_ok of migration 0012, with this one condition more).
CREATE OR REPLACE FUNCTION "stepkey"."ledger_row_ok"(
  p_scope text, p_key text, kind text, status text, lease_token uuid, locked_until timestamptz,
  outcome text, outcome_ok boolean, version integer, input text, wait_kind text, expires_at timestamptz
) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF kind NOT IN ('request', 'run', 'effect') THEN
    IF kind = 'step' THEN
      RAISE EXCEPTION 'stepkey.ledger (%, %): steps are recorded in stepkey.steps since migration 0013; a process of an earlier stepkey is still running against this database: stop it', p_scope, p_key
        USING ERRCODE = '23514', CONSTRAINT = 'ledger_row_check', SCHEMA = 'stepkey', TABLE = 'ledger';
    END IF;
    RAISE EXCEPTION 'stepkey.ledger (%, %): kind ''%'' is not request, run or effect', p_scope, p_key, kind
      USING ERRCODE = '23514', CONSTRAINT = 'ledger_row_check', SCHEMA = 'stepkey', TABLE = 'ledger';
  END IF;
  IF status NOT IN ('in_progress', 'waiting', 'completed', 'failed', 'cancelled') THEN
    RAISE EXCEPTION 'stepkey.ledger (%, %): status ''%'' is not in_progress, waiting, completed, failed or cancelled', p_scope, p_key, status
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
  IF (status IN ('completed', 'cancelled')) <> (outcome IS NOT NULL AND outcome_ok IS NOT NULL) THEN
    RAISE EXCEPTION 'stepkey.ledger (%, %): a % row % an outcome (outcome and outcome_ok)', p_scope, p_key, status,
      CASE WHEN status IN ('completed', 'cancelled') THEN 'needs' ELSE 'cannot have' END
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
-- Every key's row in the ledger's columns: the ledger's own, and each finished step as the
-- ledger held it before migration 0013 (kind 'step', its run as parent_key, completed) — for
-- the read models (inspect, a key's tree), which find a key wherever it is recorded.
CREATE VIEW "stepkey"."key_rows" AS
SELECT "scope", "key", "kind", "name", "parent_key", "fingerprint", "status", "outcome", "outcome_ok", "outcome_code",
       "last_error", "version", "input", "lease_token", "locked_until", "expires_at", "attempts", "created_at",
       "updated_at", "completed_at", "root_key", "wait_kind", "wait_step", "wait_for", "wake_at", "parent_run",
       "rerun_of", "rerun_from", "seq", "trace_context", "flow"
  FROM "stepkey"."ledger"
UNION ALL
SELECT "scope", "key", 'step', "name", "run_key", "name", 'completed', "outcome", "outcome_ok", NULL::integer,
       NULL::text, NULL::integer, NULL::text, NULL::uuid, NULL::timestamptz, NULL::timestamptz, "attempts", "completed_at",
       "completed_at", "completed_at", NULL::text, NULL::text, NULL::text, NULL::text, NULL::timestamptz, NULL::text,
       NULL::text, NULL::text, "seq", NULL::text, false
  FROM "stepkey"."steps";
