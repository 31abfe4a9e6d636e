CREATE TABLE "stepkey"."step_attempts" (
	"scope" text NOT NULL,
	"run_key" text NOT NULL,
	"step" text NOT NULL,
	"attempt" integer NOT NULL,
	"kind" text NOT NULL,
	"lease_token" uuid NOT NULL,
	"started_at" timestamp with time zone NOT NULL,
	"ended_at" timestamp with time zone,
	"outcome" text,
	"error" text,
	"resolution" text,
	"resolved_output" text,
	"resolved_at" timestamp with time zone,
	CONSTRAINT "step_attempts_pkey" PRIMARY KEY("scope","run_key","step","attempt"),
	CONSTRAINT "step_attempts_kind_check" CHECK ("stepkey"."step_attempts"."kind" in ('call', 'enqueue')),
	CONSTRAINT "step_attempts_outcome_check" CHECK ("stepkey"."step_attempts"."outcome" is null or "stepkey"."step_attempts"."outcome" in ('ok', 'failed', 'unknown')),
	CONSTRAINT "step_attempts_end_check" CHECK (("stepkey"."step_attempts"."ended_at" is null) = ("stepkey"."step_attempts"."outcome" is null)),
	CONSTRAINT "step_attempts_resolution_check" CHECK ("stepkey"."step_attempts"."resolution" is null or "stepkey"."step_attempts"."resolution" in ('reconciled', 'absent', 'resolved', 'retried'))
);
--> statement-breakpoint
ALTER TABLE "stepkey"."ledger" ADD COLUMN "rerun_of" text;--> statement-breakpoint
ALTER TABLE "stepkey"."ledger" ADD COLUMN "rerun_from" text;--> statement-breakpoint
ALTER TABLE "stepkey"."ledger" ADD COLUMN "seq" integer;--> statement-breakpoint
CREATE INDEX "ledger_reruns_idx" ON "stepkey"."ledger" USING btree ("scope","rerun_of") WHERE "stepkey"."ledger"."rerun_of" is not null;