CREATE TABLE "stepkey"."mailbox" (
	"scope" text NOT NULL,
	"run_key" text NOT NULL,
	"topic" text NOT NULL,
	"sender_key" text NOT NULL,
	"seq" bigint GENERATED ALWAYS AS IDENTITY (sequence name "stepkey"."mailbox_seq_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"fingerprint" text NOT NULL,
	"payload" text NOT NULL,
	"sent_at" timestamp with time zone DEFAULT now() NOT NULL,
	"consumed_at" timestamp with time zone,
	"consumed_by" text,
	CONSTRAINT "mailbox_pkey" PRIMARY KEY("scope","run_key","topic","sender_key")
);
--> statement-breakpoint
ALTER TABLE "stepkey"."ledger" DROP CONSTRAINT "ledger_status_check";--> statement-breakpoint
ALTER TABLE "stepkey"."ledger" ADD COLUMN "wait_kind" text;--> statement-breakpoint
ALTER TABLE "stepkey"."ledger" ADD COLUMN "wait_step" text;--> statement-breakpoint
ALTER TABLE "stepkey"."ledger" ADD COLUMN "wait_for" text;--> statement-breakpoint
ALTER TABLE "stepkey"."ledger" ADD COLUMN "wake_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "stepkey"."ledger" ADD COLUMN "parent_run" text;--> statement-breakpoint
CREATE INDEX "mailbox_unconsumed_idx" ON "stepkey"."mailbox" USING btree ("scope","run_key","topic","seq") WHERE "stepkey"."mailbox"."consumed_at" is null;--> statement-breakpoint
CREATE INDEX "ledger_due_idx" ON "stepkey"."ledger" USING btree ("wake_at") WHERE "stepkey"."ledger"."status" = 'waiting';--> statement-breakpoint
CREATE INDEX "ledger_child_runs_idx" ON "stepkey"."ledger" USING btree ("scope","parent_run") WHERE "stepkey"."ledger"."parent_run" is not null;--> statement-breakpoint
-- No row is rewritten: the new columns are nullable without defaults. The migration holds the
-- ledger's lock while it checks the new constraints and builds two partial indexes (a scan of the
-- table each); old processes may keep running meanwhile (see README, "Runs that wait").
ALTER TABLE "stepkey"."ledger" ADD CONSTRAINT "ledger_waiting_check" CHECK ("stepkey"."ledger"."status" <> 'waiting' or ("stepkey"."ledger"."kind" = 'run' and "stepkey"."ledger"."lease_token" is null and "stepkey"."ledger"."locked_until" is null and "stepkey"."ledger"."wait_kind" is not null and "stepkey"."ledger"."expires_at" is null));--> statement-breakpoint
ALTER TABLE "stepkey"."ledger" ADD CONSTRAINT "ledger_wait_kind_check" CHECK ("stepkey"."ledger"."wait_kind" is null or "stepkey"."ledger"."wait_kind" in ('timer', 'event', 'child', 'slot', 'limit', 'review'));--> statement-breakpoint
ALTER TABLE "stepkey"."ledger" ADD CONSTRAINT "ledger_status_check" CHECK ("stepkey"."ledger"."status" in ('in_progress', 'waiting', 'completed', 'failed', 'cancelled'));