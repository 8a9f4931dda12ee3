-- crashpoint runs this in a fresh schema before every schedule (examples/node-invoices).
CREATE TABLE inbox (message_id uuid PRIMARY KEY, handled_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE invoice (order_id uuid PRIMARY KEY, amount_minor bigint NOT NULL, currency text NOT NULL, issued_at timestamptz NOT NULL DEFAULT now());
