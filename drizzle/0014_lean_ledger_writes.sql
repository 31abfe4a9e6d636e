-- Less work per ledger write, the same guarantees.
--
-- 1. The lease fence is inlined. stepkey.lease_held(n) ends every fenced write; as a
--    PL/pgSQL function it was called (and set up anew in each transaction) twice per run.
--    As one SQL expression the planner inlines it into the prepared statement: nothing is
--    called unless the lease is gone, and then stepkey.lease_lost() raises SKL01 as before.
CREATE FUNCTION "stepkey"."lease_lost"() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RAISE EXCEPTION 'stepkey: the lease on this key is no longer held' USING ERRCODE = 'SKL01';
END $$;
--> statement-breakpoint
-- Guarantee (unchanged): true when exactly one row was written under the lease; otherwise
-- the statement, and the transaction it is in, fail with SKL01.
CREATE OR REPLACE FUNCTION "stepkey"."lease_held"(written bigint) RETURNS boolean LANGUAGE sql VOLATILE AS $$
  SELECT CASE WHEN written = 1 THEN true ELSE "stepkey"."lease_lost"() END
$$;
--> statement-breakpoint
-- 2. The row check decides a valid row with one expression. PL/pgSQL prepares each
--    expression of a function again in every transaction: the seven tests cost seven
--    preparations per written row. A row that passes the one expression passes each test;
--    any other row is judged test by test, as before, with the same messages.
CREATE OR REPLACE FUNCTION "stepkey"."ledger_row_ok"(
  p_scope text, p_key text, kind text, status text, lease_token uuid, locked_until timestamptz,
  outcome text, outcome_ok boolean, version integer, input text, wait_kind text, expires_at timestamptz
) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF kind IN ('request', 'run', 'effect')
     AND status IN ('in_progress', 'waiting', 'completed', 'failed', 'cancelled')
     AND (wait_kind IS NULL OR wait_kind IN ('timer', 'event', 'child', 'slot', 'limit', 'review'))
     AND NOT (status = 'in_progress' AND (lease_token IS NULL OR locked_until IS NULL))
     AND (status IN ('completed', 'cancelled')) = (outcome IS NOT NULL AND outcome_ok IS NOT NULL)
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
-- 3. No BEFORE UPDATE trigger on the ledger. A row trigger BEFORE UPDATE makes Postgres lock
--    the old row before every update of the table (a tuple lock and a WAL record more for each
--    completion, park, wake or lease renewal), whatever its WHEN says. flow_requeue turned a
--    write that resumed a failed queued run into a park waiting for a slot; the two writes that
--    resume a failed run (a claim's takeover, an operator's resume) now park it themselves, in
--    the same statement (src/flow/sql/requeue.ts, in src/ledger/sql/takeover.ts and
--    src/actions/sql/make-due.ts), and this guard refuses any other.
DROP TRIGGER "ledger_flow_requeue" ON "stepkey"."ledger";
--> statement-breakpoint
DROP FUNCTION "stepkey"."flow_requeue"();
--> statement-breakpoint
-- Guarantee (unchanged): a failed run on a queue never runs again without a slot. A write that
-- takes such a run back into progress while its queue entry is marked failed is refused, and
-- its transaction rolls back; the run goes back in line only as a park waiting for a slot.
CREATE FUNCTION "stepkey"."flow_resume_guard"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM "stepkey"."queue_entries" WHERE scope = NEW.scope AND key = NEW.key AND failed) THEN
    RAISE EXCEPTION 'stepkey.ledger (%, %): a failed run on a queue resumes by waiting for a slot (status waiting, wait_kind slot), not in progress', NEW.scope, NEW.key
      USING ERRCODE = '23514', SCHEMA = 'stepkey', TABLE = 'ledger';
  END IF;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER "ledger_flow_resume_guard" AFTER UPDATE OF status ON "stepkey"."ledger"
  FOR EACH ROW WHEN (OLD.kind = 'run' AND OLD.flow AND OLD.status = 'failed' AND NEW.status = 'in_progress')
  EXECUTE FUNCTION "stepkey"."flow_resume_guard"();
