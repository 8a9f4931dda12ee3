-- crashpoint runs this in a fresh schema before every schedule (examples/node-payments).
-- One row per order: the payment intent that charged it and what the worker concluded. The
-- card processor's own ledger is crashpoint's table crashpoint_provider_calls.
CREATE TABLE payment (order_id uuid PRIMARY KEY, intent_id text NOT NULL, amount_minor bigint NOT NULL, status text NOT NULL);
-- The webhook endpoint's (webhooks.js): the events it processed (the dedup: one row per event
-- id, written in the transaction of the credit) and the merchant's ledger, one credit per charge.
CREATE TABLE processed_event (event_id text PRIMARY KEY);
CREATE TABLE ledger (order_id uuid NOT NULL, intent_id text NOT NULL, amount_minor bigint NOT NULL, event_id text NOT NULL);
