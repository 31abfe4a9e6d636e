CREATE SCHEMA "payments";
--> statement-breakpoint
CREATE SCHEMA IF NOT EXISTS "shop";
--> statement-breakpoint
CREATE TABLE "payments"."charges" (
	"id" text PRIMARY KEY NOT NULL,
	"merchant" text NOT NULL,
	"idempotency_key" text NOT NULL,
	"amount_cents" integer NOT NULL,
	"currency" text NOT NULL,
	"reference" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "shop"."mailbox" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"tenant" text NOT NULL,
	"recipient" text NOT NULL,
	"subject" text NOT NULL,
	"body" text NOT NULL,
	"message_key" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "mailbox_message_key_unique" UNIQUE("message_key")
);
--> statement-breakpoint
CREATE TABLE "shop"."orders" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"tenant" text NOT NULL,
	"run_key" text NOT NULL,
	"sku" text NOT NULL,
	"quantity" integer NOT NULL,
	"email" text NOT NULL,
	"status" text NOT NULL,
	"payment_id" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "orders_run_key_unique" UNIQUE("run_key"),
	CONSTRAINT "orders_status_check" CHECK ("shop"."orders"."status" in ('reserved', 'paid'))
);
--> statement-breakpoint
CREATE TABLE "shop"."stock" (
	"sku" text PRIMARY KEY NOT NULL,
	"available" integer NOT NULL,
	"price_cents" integer NOT NULL,
	CONSTRAINT "stock_available_check" CHECK ("shop"."stock"."available" >= 0)
);
--> statement-breakpoint
CREATE INDEX "charges_reference_idx" ON "payments"."charges" USING btree ("reference");--> statement-breakpoint
CREATE INDEX "orders_tenant_idx" ON "shop"."orders" USING btree ("tenant","id");