-- The audit log records two more operator actions: resolve (a run that needs review) and rerun (from a step).
-- Every row already there satisfies the wider check; the table is small (one row per operator action).
ALTER TABLE "stepkey"."audit_log" DROP CONSTRAINT "audit_log_action_check";--> statement-breakpoint
ALTER TABLE "stepkey"."audit_log" ADD CONSTRAINT "audit_log_action_check" CHECK ("stepkey"."audit_log"."action" in ('cancel', 'resume', 'retry_job', 'resolve', 'rerun'));
