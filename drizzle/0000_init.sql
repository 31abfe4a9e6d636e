CREATE SCHEMA IF NOT EXISTS "stepkey";
--> statement-breakpoint
CREATE TABLE "stepkey"."inbox" (
	"consumer" text NOT NULL,
	"message_key" text NOT NULL,
	"processed_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	CONSTRAINT "inbox_pkey" PRIMARY KEY("consumer","message_key")
);
--> statement-breakpoint
CREATE TABLE "stepkey"."ledger" (
	"scope" text NOT NULL,
	"key" text NOT NULL,
	"kind" text NOT NULL,
	"name" text,
	"parent_key" text,
	"fingerprint" text NOT NULL,
	"status" text NOT NULL,
	"outcome" text,
	"outcome_ok" boolean,
	"outcome_code" integer,
	"last_error" text,
	"version" integer,
	"input" text,
	"lease_token" uuid,
	"locked_until" timestamp with time zone,
	"expires_at" timestamp with time zone,
	"attempts" integer DEFAULT 1 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"completed_at" timestamp with time zone,
	CONSTRAINT "ledger_pkey" PRIMARY KEY("scope","key"),
	CONSTRAINT "ledger_status_check" CHECK ("stepkey"."ledger"."status" in ('in_progress', 'completed', 'failed', 'cancelled')),
	CONSTRAINT "ledger_kind_check" CHECK ("stepkey"."ledger"."kind" in ('request', 'run', 'step', 'effect')),
	CONSTRAINT "ledger_outcome_check" CHECK (("stepkey"."ledger"."status" in ('completed', 'cancelled')) = ("stepkey"."ledger"."outcome" is not null and "stepkey"."ledger"."outcome_ok" is not null)),
	CONSTRAINT "ledger_lease_check" CHECK ("stepkey"."ledger"."status" <> 'in_progress' or ("stepkey"."ledger"."lease_token" is not null and "stepkey"."ledger"."locked_until" is not null)),
	CONSTRAINT "ledger_run_check" CHECK ("stepkey"."ledger"."kind" = 'run' or ("stepkey"."ledger"."version" is null and "stepkey"."ledger"."input" is null))
);
--> statement-breakpoint
CREATE TABLE "stepkey"."worker_pools" (
	"pool_id" text PRIMARY KEY NOT NULL,
	"hostname" text NOT NULL,
	"pid" integer NOT NULL,
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"last_beat_at" timestamp with time zone DEFAULT now() NOT NULL,
	"stopped_at" timestamp with time zone
);
--> statement-breakpoint
CREATE INDEX "inbox_expiry_idx" ON "stepkey"."inbox" USING btree ("expires_at");--> statement-breakpoint
CREATE INDEX "ledger_children_idx" ON "stepkey"."ledger" USING btree ("scope","parent_key") WHERE "stepkey"."ledger"."parent_key" is not null;--> statement-breakpoint
CREATE INDEX "ledger_run_leases_idx" ON "stepkey"."ledger" USING btree ("locked_until") WHERE "stepkey"."ledger"."status" = 'in_progress' and "stepkey"."ledger"."kind" = 'run';--> statement-breakpoint
CREATE INDEX "ledger_expiry_idx" ON "stepkey"."ledger" USING btree ("expires_at") WHERE "stepkey"."ledger"."parent_key" is null and "stepkey"."ledger"."expires_at" is not null;