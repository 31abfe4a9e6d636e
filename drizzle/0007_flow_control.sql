CREATE TABLE "stepkey"."queue_entries" (
	"scope" text NOT NULL,
	"key" text NOT NULL,
	"queue" text NOT NULL,
	"partition" text NOT NULL,
	"priority" integer DEFAULT 0 NOT NULL,
	"seq" bigint GENERATED ALWAYS AS IDENTITY (sequence name "stepkey"."queue_entries_seq_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"enqueued_at" timestamp with time zone DEFAULT now() NOT NULL,
	"not_before" timestamp with time zone DEFAULT now() NOT NULL,
	"holding" boolean DEFAULT false NOT NULL,
	"granted_at" timestamp with time zone,
	"granted_token" uuid,
	CONSTRAINT "queue_entries_pkey" PRIMARY KEY("scope","key"),
	CONSTRAINT "queue_entries_priority_check" CHECK ("stepkey"."queue_entries"."priority" between -1000 and 1000)
);
--> statement-breakpoint
CREATE TABLE "stepkey"."queue_partitions" (
	"queue" text NOT NULL,
	"partition" text NOT NULL,
	"last_served_at" timestamp with time zone,
	"served" bigint DEFAULT 0 NOT NULL,
	CONSTRAINT "queue_partitions_pkey" PRIMARY KEY("queue","partition")
);
--> statement-breakpoint
CREATE TABLE "stepkey"."queues" (
	"name" text PRIMARY KEY NOT NULL,
	"concurrency" integer NOT NULL,
	"per_partition" integer,
	"rate_limit" integer,
	"rate_period_ms" integer,
	"tokens" double precision,
	"refilled_at" timestamp with time zone,
	"written_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "queues_concurrency_check" CHECK ("stepkey"."queues"."concurrency" > 0 and ("stepkey"."queues"."per_partition" is null or "stepkey"."queues"."per_partition" > 0)),
	CONSTRAINT "queues_rate_check" CHECK (("stepkey"."queues"."rate_limit" is null) = ("stepkey"."queues"."rate_period_ms" is null) and ("stepkey"."queues"."rate_limit" is null or ("stepkey"."queues"."rate_limit" > 0 and "stepkey"."queues"."rate_period_ms" > 0)))
);
--> statement-breakpoint
CREATE INDEX "queue_entries_waiting_idx" ON "stepkey"."queue_entries" USING btree ("queue","partition","priority" DESC NULLS LAST,"seq") WHERE not "stepkey"."queue_entries"."holding";--> statement-breakpoint
CREATE INDEX "queue_entries_holding_idx" ON "stepkey"."queue_entries" USING btree ("queue","partition") WHERE "stepkey"."queue_entries"."holding";--> statement-breakpoint
-- Flow control: a run's slot is given back in the transaction that ends, fails,
-- cancels or parks the run. Every such ledger write is fenced by the run's lease
-- token (or is an operator's cancel of the row it locks), so a stale holder can
-- never give back the slot of a run that another process took over. A run that
-- ends leaves its queue; a run that parks (timer, event, child, review) keeps its
-- place but not its slot, and is dispatched again once it is due.
CREATE FUNCTION "stepkey"."flow_release"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status = 'waiting' THEN
    IF NEW.wait_kind <> 'slot' THEN
      UPDATE "stepkey"."queue_entries" SET holding = false, granted_token = null
       WHERE scope = NEW.scope AND key = NEW.key AND holding;
    END IF;
  ELSE
    DELETE FROM "stepkey"."queue_entries" WHERE scope = NEW.scope AND key = NEW.key;
  END IF;
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER "ledger_flow_release" AFTER UPDATE OF status ON "stepkey"."ledger"
  FOR EACH ROW WHEN (OLD.kind = 'run' AND OLD.status IS DISTINCT FROM NEW.status AND NEW.status <> 'in_progress')
  EXECUTE FUNCTION "stepkey"."flow_release"();
