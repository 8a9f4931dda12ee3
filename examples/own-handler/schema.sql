-- The own-handler example's schema, run in a fresh PostgreSQL schema before each schedule.

-- The handler's inbox: one row per email request it has handled, keyed by the request's
-- operation id (the idempotency key in the message body). The handler inserts it with
-- ON CONFLICT DO NOTHING in the same transaction as the email, so a redelivered or duplicated
-- request finds its row and sends nothing.
CREATE TABLE email_request (
    operation_id uuid PRIMARY KEY,
    recipient    text        NOT NULL,
    template     text        NOT NULL,
    received_at  timestamptz NOT NULL
);

-- The effect: emails queued for the mail relay (an outbox the relay drains). There is
-- deliberately no UNIQUE (operation_id) here: the inbox above is the guard, and the invariant
-- "at most one email per operation id" checks that it holds.
CREATE TABLE outgoing_email (
    id           bigserial   PRIMARY KEY,
    operation_id uuid        NOT NULL,
    recipient    text        NOT NULL,
    template     text        NOT NULL,
    queued_at    timestamptz NOT NULL
);
