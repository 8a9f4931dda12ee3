-- The check-then-insert variant's schema: invoice has no unique constraint on order_id, so
-- nothing but the worker's SELECT keeps an order from getting two invoices.
CREATE TABLE inbox (message_id uuid PRIMARY KEY, handled_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE invoice (id bigserial PRIMARY KEY, order_id uuid NOT NULL, amount_minor bigint NOT NULL, currency text NOT NULL, issued_at timestamptz NOT NULL DEFAULT now());
