CREATE TABLE "stepkey"."limit_partitions" (
	"limit_name" text NOT NULL,
	"partition" text NOT NULL,
	"held" integer DEFAULT 0 NOT NULL,
	"tokens" double precision,
	"refilled_at" timestamp with time zone,
	"granted" bigint DEFAULT 0 NOT NULL,
	CONSTRAINT "limit_partitions_pkey" PRIMARY KEY("limit_name","partition"),
	CONSTRAINT "limit_partitions_held_check" CHECK ("stepkey"."limit_partitions"."held" >= 0)
);
--> statement-breakpoint
CREATE TABLE "stepkey"."limit_slots" (
	"scope" text NOT NULL,
	"key" text NOT NULL,
	"limit_name" text NOT NULL,
	"partition" text NOT NULL,
	"step" text NOT NULL,
	"token" uuid NOT NULL,
	"granted_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "limit_slots_pkey" PRIMARY KEY("scope","key","limit_name","partition")
);
--> statement-breakpoint
CREATE TABLE "stepkey"."limits" (
	"name" text PRIMARY KEY NOT NULL,
	"concurrency" integer,
	"rate_limit" integer,
	"rate_period_ms" integer,
	"written_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "limits_settings_check" CHECK (("stepkey"."limits"."rate_limit" is null) = ("stepkey"."limits"."rate_period_ms" is null) and ("stepkey"."limits"."rate_limit" is null or ("stepkey"."limits"."rate_limit" > 0 and "stepkey"."limits"."rate_period_ms" > 0)) and ("stepkey"."limits"."concurrency" is null or "stepkey"."limits"."concurrency" > 0) and ("stepkey"."limits"."concurrency" is not null or "stepkey"."limits"."rate_limit" is not null))
);
--> statement-breakpoint
CREATE INDEX "limit_slots_partition_idx" ON "stepkey"."limit_slots" USING btree ("limit_name","partition");--> statement-breakpoint
CREATE INDEX "ledger_limit_waiters_idx" ON "stepkey"."ledger" USING btree ("wait_for","updated_at") WHERE "stepkey"."ledger"."status" = 'waiting' and "stepkey"."ledger"."wait_kind" = 'limit';--> statement-breakpoint
-- Step limits: what a run parked on a limit waits for, as its ledger row records it
-- (wait_for): the limit's name, and the partition in brackets when there is one.
CREATE FUNCTION "stepkey"."limit_wait_for"(p_limit text, p_partition text) RETURNS text
  LANGUAGE sql IMMUTABLE AS $$ SELECT p_limit || CASE WHEN p_partition = '' THEN '' ELSE '[' || p_partition || ']' END $$;
--> statement-breakpoint
-- Gives back a run's limit slots — those of step p_step under lease token p_token, or
-- with p_step null every slot the run holds — and, for each slot given back, marks the
-- longest-waiting run parked on that limit and partition due now. Returns the runs
-- marked due, for a prompt wake in the process that gave the slot back; the sweeper
-- takes them otherwise. The partition's row is updated (and so locked) before the
-- waiter is looked for: an acquire that was refused holds that row's lock until its
-- park commits, so a wake-up is never lost between a refusal and its park.
CREATE FUNCTION "stepkey"."limit_give_back"(p_scope text, p_key text, p_step text, p_token uuid)
  RETURNS TABLE(woken_scope text, woken_key text) LANGUAGE plpgsql AS $$
DECLARE
  freed record;
BEGIN
  FOR freed IN
    DELETE FROM "stepkey"."limit_slots" s
     WHERE s.scope = p_scope AND s.key = p_key
       AND (p_step IS NULL OR (s.step = p_step AND s.token = p_token))
    RETURNING s.limit_name, s.partition
  LOOP
    UPDATE "stepkey"."limit_partitions" p SET held = p.held - 1
     WHERE p.limit_name = freed.limit_name AND p.partition = freed.partition;
    RETURN QUERY
      UPDATE "stepkey"."ledger" l SET wake_at = now()
        FROM (SELECT w.scope, w.key FROM "stepkey"."ledger" w
               WHERE w.status = 'waiting' AND w.wait_kind = 'limit'
                 AND w.wait_for = "stepkey"."limit_wait_for"(freed.limit_name, freed.partition)
                 AND w.wake_at > now()
               ORDER BY w.updated_at
               LIMIT 1
               FOR UPDATE SKIP LOCKED) w
       WHERE l.scope = w.scope AND l.key = w.key
      RETURNING l.scope, l.key;
  END LOOP;
END $$;
--> statement-breakpoint
-- A run's limit slots are given back in the transaction that ends, fails, cancels or
-- parks it (every such write is fenced by its lease token, or is an operator's cancel of
-- the row it locks). A takeover changes no status: the slot stays with the run, and its
-- new holder writes its token when it reaches the step again.
CREATE FUNCTION "stepkey"."limit_release"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM "stepkey"."limit_give_back"(NEW.scope, NEW.key, null, null);
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER "ledger_limit_release" AFTER UPDATE OF status ON "stepkey"."ledger"
  FOR EACH ROW WHEN (OLD.kind = 'run' AND OLD.status IS DISTINCT FROM NEW.status AND NEW.status <> 'in_progress')
  EXECUTE FUNCTION "stepkey"."limit_release"();
