-- The pg-jobs demo: a PostgreSQL-only job queue (Symfony Messenger's Doctrine transport).
-- Plain DDL, loaded into a fresh schema before every schedule (no schema qualification).

-- The transport's table: a job is claimed by setting delivered_at, and deleted on ack.
-- A job whose delivered_at is older than the redeliver timeout is claimed again.
CREATE TABLE messenger_messages (
  id bigserial PRIMARY KEY,
  body jsonb NOT NULL,
  queue_name text NOT NULL DEFAULT 'default',
  created_at timestamptz NOT NULL DEFAULT now(),
  available_at timestamptz NOT NULL DEFAULT now(),
  delivered_at timestamptz
);

-- The payment provider, standing in for an external API that honours idempotency keys
-- (as Stripe's Idempotency-Key does): a request with a key it has seen is not applied again.
CREATE TABLE provider_charge (
  id bigserial PRIMARY KEY,
  idempotency_key text UNIQUE,      -- NULL: a request without a key, applied every time
  order_id uuid NOT NULL,
  amount_minor bigint NOT NULL
);
