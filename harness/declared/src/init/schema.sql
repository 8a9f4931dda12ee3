-- EDIT: your tables. crashpoint runs this in a fresh schema before every schedule, with
-- now() following its logical clock.
CREATE TABLE inbox (message_id uuid PRIMARY KEY, handled_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE effect (order_id uuid PRIMARY KEY, amount_minor bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
