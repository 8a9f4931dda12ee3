"""crashpoint's pg-jobs demo worker: a PostgreSQL-only job queue, claimed as Symfony Messenger's
Doctrine transport claims it.

The transport. There is no broker: a job is a row of `messenger_messages`. A worker claims the
oldest available row by setting its `delivered_at` to now() (a subquery with
`FOR UPDATE SKIP LOCKED`, so two workers never claim the same row at the same instant), handles
it, and acknowledges it by deleting the row. A row whose `delivered_at` is older than the
redeliver timeout counts as abandoned (its worker is presumed dead) and is claimed again: that
is how the transport recovers a job whose worker crashed.

The window (symfony/symfony #49394). The transport cannot tell a dead worker from a slow one:
when the first worker is still running after the redeliver timeout, a second worker re-claims
the job and runs it too. The job's external effect, here a charge sent to a payment provider
(the `provider_charge` table stands in for an API such as Stripe's), then happens twice unless
the request carries an idempotency key that the provider deduplicates on.

The variants, chosen by CRASHPOINT_SYSTEM:
  reference           the charge carries the job's stable operation id, 'charge:' + jobId, as
                      its idempotency key: a second request for the same job is not applied.
  no-idempotency-key  the charge carries no key (NULL), a real team's bug: every request is
                      applied, so a redelivered job charges the order twice.
  exits-on-error      the poll loop catches only a lost connection: any other database error
                      (a claim that fails, a deadlock, a statement timeout) ends the process,
                      a pod in a crash loop (crashpoint reports "workers survive the faults
                      injected").
  ack-on-error        a charge that fails is logged and the job acknowledged as if handled (an
                      `except` that falls through to the ack): the job is never charged.
  release-on-error    harmless: a charge that fails releases the job at once (delivered_at =
                      NULL) for another try, instead of waiting for the redeliver timeout.

Per job, each step is one statement in autocommit on one connection (crashpoint holds each
statement at its gating proxy until its scheduler grants it, and may SIGKILL the worker between
any two of them):
  1. claim   UPDATE messenger_messages SET delivered_at = now() ... RETURNING id, body
  2. charge  INSERT INTO provider_charge ... ON CONFLICT (idempotency_key) DO NOTHING
  3. ack     DELETE FROM messenger_messages WHERE id = ...
(release-on-error's release after a failed charge: UPDATE messenger_messages SET delivered_at = NULL.)
An empty claim is followed at once by the next one (no sleep: crashpoint decides when the next
poll runs). A charge that fails leaves the job claimed, to be redelivered after the timeout. A
dropped connection is closed and opened again; the worker never exits by itself (but the
exits-on-error variant).

The worker reads no clock and draws no random number: all time is the database's now(), which
crashpoint makes follow its logical clock, and every id comes from the job. Its configuration is
the environment: DATABASE_URL (libpq URI), CRASHPOINT_SYSTEM, CRASHPOINT_CONFIG (a JSON object;
`redeliver_timeout_s`, default 60) and CRASHPOINT_WORKER (the prefix of the lines it prints).
"""
import json
import os
import signal
import sys
import uuid

import psycopg

SYSTEMS = ("reference", "no-idempotency-key", "exits-on-error", "ack-on-error", "release-on-error")
SYSTEM = os.environ.get("CRASHPOINT_SYSTEM") or "reference"
WORKER = os.environ.get("CRASHPOINT_WORKER") or "pg-jobs"
CONFIG = json.loads(os.environ.get("CRASHPOINT_CONFIG") or "{}")
REDELIVER_TIMEOUT_S = float(CONFIG.get("redeliver_timeout_s", 60))

# Each statement starts with a comment naming its call for crashpoint's trace.
CLAIM = """/* crashpoint:claim */ UPDATE messenger_messages SET delivered_at = now()
WHERE id = (SELECT id FROM messenger_messages
            WHERE queue_name = 'default' AND available_at <= now()
              AND (delivered_at IS NULL OR delivered_at < now() - make_interval(secs => %s))
            ORDER BY available_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, body"""
CHARGE = """/* crashpoint:charge */ INSERT INTO provider_charge (idempotency_key, order_id, amount_minor) \
VALUES (%s, %s, %s) ON CONFLICT (idempotency_key) DO NOTHING"""
ACK = "/* crashpoint:ack */ DELETE FROM messenger_messages WHERE id = %s"
RELEASE = "/* crashpoint:release */ UPDATE messenger_messages SET delivered_at = NULL WHERE id = %s"


def say(line):
    print(f"{WORKER}: {line}", flush=True)


def describe(e):
    if isinstance(e, psycopg.Error) and e.sqlstate:
        return f"postgres {e.sqlstate}: {e.diag.message_primary}"
    return str(e).strip() or type(e).__name__


def connect():
    # Autocommit: no BEGIN/COMMIT of psycopg's own, each statement is one call. No prepared
    # statements: each statement is one Parse/Bind/Execute/Sync, the same on every run.
    return psycopg.connect(os.environ["DATABASE_URL"], autocommit=True, prepare_threshold=None)


def dropped(conn, e):
    """Whether the error lost the connection (crashpoint closed it, or the server went away)."""
    if conn.closed or conn.broken:
        return True
    # A client-side failure with no SQLSTATE from the server (e.g. the socket was reset).
    return isinstance(e, psycopg.OperationalError) and e.sqlstate is None


def idempotency_key(job):
    if SYSTEM == "no-idempotency-key":
        return None  # the bug: a request without a key, which the provider applies every time
    return "charge:" + job["jobId"]  # the job's stable operation id


def handle(conn, job_id, body):
    """Charge, then ack: one statement each. Returns a line for the log."""
    try:
        job = {"jobId": str(uuid.UUID(body["jobId"])), "orderId": uuid.UUID(body["orderId"]),
               "amountMinor": body["amountMinor"]}
        if type(job["amountMinor"]) is not int:
            raise TypeError("amountMinor must be an integer")
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        # No effect; the job stays claimed and is redelivered after the timeout, as a failed one.
        return f"job {job_id}: malformed body ({describe(e)}), left for redelivery"
    try:
        cur = conn.execute(CHARGE, (idempotency_key(job), job["orderId"], job["amountMinor"]))
    except psycopg.Error as e:
        if dropped(conn, e):
            raise
        failed = f"job {job_id} ({job['jobId']}): charge failed ({describe(e)})"
        if SYSTEM == "ack-on-error":
            conn.execute(ACK, (job_id,))  # the bug: the failure is logged, the job acknowledged
            return f"{failed}, logged and acked"
        if SYSTEM == "release-on-error":
            conn.execute(RELEASE, (job_id,))
            return f"{failed}, released for another try"
        # Leave the job: the redeliver timeout hands it out again.
        return f"{failed}, left for redelivery"
    charged = "charged" if cur.rowcount == 1 else "charge already applied (same idempotency key)"
    conn.execute(ACK, (job_id,))
    return f"job {job_id} ({job['jobId']}): {charged}, acked"


def main():
    if SYSTEM not in SYSTEMS:
        sys.exit(f"{WORKER}: unknown CRASHPOINT_SYSTEM {SYSTEM!r} (one of {', '.join(SYSTEMS)})")
    if not os.environ.get("DATABASE_URL"):
        sys.exit(f"{WORKER}: environment variable DATABASE_URL is not set")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    say(f"{SYSTEM} worker, redeliver timeout {REDELIVER_TIMEOUT_S:g}s")
    conn = None
    connect_failed = False  # print one line per run of failed connection attempts
    try:
        while True:
            try:
                if conn is None:
                    try:
                        conn = connect()
                    except psycopg.Error as e:
                        if not connect_failed:
                            say(f"cannot connect ({describe(e)}), trying again")
                        connect_failed = True
                        continue
                    connect_failed = False
                row = conn.execute(CLAIM, (REDELIVER_TIMEOUT_S,)).fetchone()
                if row is None:
                    continue  # nothing to do: poll again at once
                job_id, body = row
                say(handle(conn, job_id, body))
            except psycopg.Error as e:
                if not dropped(conn, e):
                    if SYSTEM == "exits-on-error":
                        raise  # the bug: only a lost connection was expected here
                    say(f"error: {describe(e)}")  # e.g. a failed claim or ack: go on
                    continue
                say(f"connection lost ({describe(e)}), reconnecting")
                conn.close()
                conn = None
    finally:
        if conn is not None:
            conn.close()


if __name__ == "__main__":
    main()
