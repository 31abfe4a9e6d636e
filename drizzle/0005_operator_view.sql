CREATE TABLE "stepkey"."audit_log" (
	"scope" text NOT NULL,
	"id" bigint GENERATED ALWAYS AS IDENTITY (sequence name "stepkey"."audit_log_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"at" timestamp with time zone DEFAULT now() NOT NULL,
	"action" text NOT NULL,
	"actor" text NOT NULL,
	"source" text NOT NULL,
	"key" text,
	"job_id" text,
	"applied" boolean NOT NULL,
	"detail" text,
	CONSTRAINT "audit_log_pkey" PRIMARY KEY("scope","id"),
	CONSTRAINT "audit_log_action_check" CHECK ("stepkey"."audit_log"."action" in ('cancel', 'resume', 'retry_job'))
);
--> statement-breakpoint
ALTER TABLE "stepkey"."worker_pools" ADD COLUMN "unlocked_at" timestamp with time zone;--> statement-breakpoint
CREATE INDEX "audit_log_key_idx" ON "stepkey"."audit_log" USING btree ("scope","key") WHERE "stepkey"."audit_log"."key" is not null;--> statement-breakpoint
CREATE INDEX "audit_log_at_idx" ON "stepkey"."audit_log" USING btree ("at");--> statement-breakpoint
CREATE INDEX "ledger_runs_created_idx" ON "stepkey"."ledger" USING btree ("created_at","scope","key") WHERE "stepkey"."ledger"."kind" = 'run';--> statement-breakpoint
CREATE INDEX "ledger_runs_workflow_idx" ON "stepkey"."ledger" USING btree ("name","version","created_at","scope","key") WHERE "stepkey"."ledger"."kind" = 'run';--> statement-breakpoint
CREATE INDEX "ledger_runs_unsuccessful_idx" ON "stepkey"."ledger" USING btree ("created_at","scope","key") WHERE "stepkey"."ledger"."kind" = 'run' and ("stepkey"."ledger"."status" = 'failed' or "stepkey"."ledger"."status" = 'cancelled' or ("stepkey"."ledger"."status" = 'completed' and not "stepkey"."ledger"."outcome_ok"));