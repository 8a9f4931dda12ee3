"""crashpoint's demo external worker: the payout article's payout consumer as a plain Python SQS worker.

It receives PaymentCaptured from SQS (boto3) and, in one PostgreSQL transaction (psycopg 3),
claims the event in processed_message, creates the merchant payout and writes the
MerchantPayoutCreated outbox row; then it releases the producer's dispatch lock in Redis (a
compare-and-delete of the token its message carries)
(redis-py) and deletes the message. On an error it rolls back, then either makes the message
visible again later (retry with backoff) or parks it in failed_message.

It makes the same service calls, in the same order, as crashpoint's in-tree Rust consumer
(harness/workloads/payout/src/reference/ and mutants/consumers.rs), so that crashpoint, which
runs it behind gating proxies, can hold, fail or crash it at each call. CRASHPOINT_SYSTEM picks
the variant: reference, check-then-insert or ack-before-commit. All configuration comes from the
environment (README.md). `crashpoint_now()` is crashpoint's logical clock, defined in the schema.
"""
import json
import os
import signal
import sys
import uuid

import boto3
import psycopg
import redis
from botocore.config import Config
from psycopg.types.json import Jsonb

CONSUMER = "create-merchant-payout-v1"
SYSTEM = os.environ.get("CRASHPOINT_SYSTEM") or "reference"
WORKER = os.environ.get("CRASHPOINT_WORKER") or "python-worker"
CONFIG = json.loads(os.environ.get("CRASHPOINT_CONFIG") or "{}")
# Defaults of the Rust SystemConfig (harness/workloads/payout/src/system.rs).
MAX_RETRIES = int(CONFIG.get("max_retries", 3))
RETRY_DELAY_S = int(CONFIG.get("retry_delay_s", 1))

# The statements of the Rust consumer, named for crashpoint's trace by their leading comment.
# Where the Rust code binds the logical clock (Val::Now) they call crashpoint_now().
CLAIM = """/* crashpoint:claim */ INSERT INTO processed_message (consumer_name, message_id, processed_at)
VALUES (%s, %s, crashpoint_now()) ON CONFLICT (consumer_name, message_id) DO NOTHING RETURNING message_id"""
INSERT_PAYOUT = """/* crashpoint:insert_payout */ INSERT INTO merchant_payout
(id, source_payment_id, merchant_id, amount_minor, currency) VALUES (gen_random_uuid(), %s, %s, %s, %s)"""
GUARD = " ON CONFLICT (source_payment_id) DO NOTHING"  # the payout article; check-then-insert has no guard
INSERT_OUTBOX = """/* crashpoint:insert_outbox */ INSERT INTO outbox_event
(id, causation_id, event_type, aggregate_id, payload, next_attempt_at)
VALUES (gen_random_uuid(), %s, 'MerchantPayoutCreated', %s, %s, crashpoint_now()) RETURNING id"""
CHECK = "/* crashpoint:check */ SELECT EXISTS (SELECT 1 FROM merchant_payout WHERE source_payment_id = %s)"
PARK = """/* crashpoint:park */ INSERT INTO failed_message (consumer_name, message_id, body, reason, failed_at)
VALUES (%s, %s, %s, %s, crashpoint_now())"""


class Unrecoverable(Exception):
    """Retrying cannot help (Messenger's UnrecoverableMessageHandlingException): park."""


def env(name):
    if not os.environ.get(name):
        sys.exit(f"{WORKER}: environment variable {name} is not set")
    return os.environ[name]


class Services:
    """The worker's three clients and its queue."""

    def __init__(self):
        self.queue_url = env("CRASHPOINT_QUEUE_URL")
        # crashpoint holds each call until its scheduler grants it: the read timeout must be long.
        # (botocore's max_attempts counts retries: at most 4 attempts, one amz-sdk-invocation-id.)
        config = Config(read_timeout=3600, retries={"mode": "standard", "max_attempts": 3})
        self.sqs = boto3.client("sqs", config=config)
        # No CLIENT SETINFO on connect: only the worker's own commands reach Redis.
        self.redis = redis.Redis.from_url(env("REDIS_URL"), lib_name=None, lib_version=None)
        self.db = self.connect()  # the only client that connects at once

    def connect(self):
        # Not autocommit: psycopg sends BEGIN (a query of its own) before a transaction's first
        # statement. No prepared statements: each statement is one Parse/Bind/Execute/Sync.
        return psycopg.connect(env("DATABASE_URL"), autocommit=False, prepare_threshold=None)

    def delete(self, m):
        self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])


def describe(e):
    if isinstance(e, psycopg.Error) and e.sqlstate:
        return f"postgres {e.sqlstate}: {e.diag.message_primary}"
    return str(e) or type(e).__name__


def parse(body):
    """PaymentCaptured (messages.rs); raises ValueError, KeyError or TypeError when malformed."""
    d = json.loads(body)
    if type(d["amount_minor"]) is not int or type(d["currency"]) is not str:
        raise ValueError("amount_minor must be an integer and currency a string")
    ids = {k: uuid.UUID(d[k]) for k in ("event_id", "payment_id", "merchant_id")}
    return dict(ids, amount_minor=d["amount_minor"], currency=d["currency"], lock_token=d.get("lock_token"))


# Releases a dispatch lock, (key, token): only while the key still holds the token the producer
# stored and the message carries (Redis documentation, "Distributed locks with Redis"), so a lock
# that expired and was taken by a later dispatch stays with it; a plain DEL without a token.
COMPARE_AND_DELETE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end"


def release(s, lock):
    key, token = lock
    if token is None:
        s.redis.delete(key)
    else:
        s.redis.eval(COMPARE_AND_DELETE, 1, key, token)


def receive_count(m):
    return int(m.get("Attributes", {}).get("ApproximateReceiveCount", 1))


def claim(s, ev):
    return s.db.execute(CLAIM, (CONSUMER, ev["event_id"])).fetchone() is not None


def pay(s, ev, guarded):
    """The payout and its outbox row, inside the open transaction (psycopg began it)."""
    vals = (ev["payment_id"], ev["merchant_id"], ev["amount_minor"], ev["currency"])
    row = s.db.execute(INSERT_PAYOUT + (GUARD if guarded else "") + " RETURNING id", vals).fetchone()
    if row is None and guarded:
        raise Unrecoverable(f"Payment {ev['payment_id']} already has a merchant payout")
    if row is None:
        raise RuntimeError("INSERT returned no row")
    payload = {"payoutId": str(row[0]), "paymentId": str(ev["payment_id"]),
               "merchantId": str(ev["merchant_id"]), "amount": ev["amount_minor"], "currency": ev["currency"]}
    s.db.execute(INSERT_OUTBOX, (ev["event_id"], ev["payment_id"], Jsonb(payload)))


def handle(s, ev):
    """reference: claim, payout, outbox, COMMIT; a duplicate only commits the empty claim."""
    if not claim(s, ev):
        s.db.commit()
        return "duplicate, no effect"
    pay(s, ev, guarded=True)
    s.db.commit()
    return "payout created"


def check_then_insert(s, ev):
    """check-then-insert: SELECT EXISTS, then INSERT, with no claim (the race is the defect)."""
    if s.db.execute(CHECK, (ev["payment_id"],)).fetchone()[0]:
        raise Unrecoverable(f"Payment {ev['payment_id']} already has a merchant payout")
    pay(s, ev, guarded=False)
    s.db.commit()
    return "payout created"


def park(s, m, reason, lock):
    """Failure transport: one autocommit INSERT (no BEGIN/COMMIT), release the lock, delete."""
    try:
        body = json.loads(m["Body"])
    except ValueError:
        body = m["Body"]
    ident = None
    if isinstance(body, dict):
        ident = body["event_id"] if "event_id" in body else body.get("outbox_id")
    try:
        message_id = uuid.UUID(ident)
    except (TypeError, ValueError, AttributeError):
        message_id = uuid.UUID(int=0)
    s.db.autocommit = True  # as the Rust park: a statement outside any transaction
    try:
        s.db.execute(PARK, (CONSUMER, message_id, Jsonb(body), reason))
    finally:
        s.db.autocommit = False
    if lock:
        release(s, lock)
    s.delete(m)
    return f"parked: {reason}"


def fail(s, m, error, lock):
    """After an error: ROLLBACK (when a transaction is open), then park or retry later."""
    try:
        s.db.rollback()
    except psycopg.OperationalError:
        pass  # the connection dropped: the server rolled back what had not committed (the loop reconnects)
    attempt = max(receive_count(m), 1)
    if isinstance(error, Unrecoverable) or attempt > MAX_RETRIES:
        if isinstance(error, Unrecoverable):
            return park(s, m, str(error), lock)
        return park(s, m, f"retries exhausted after {attempt} attempts: {describe(error)}", lock)
    delay = RETRY_DELAY_S << min(attempt - 1, 16)  # logical seconds
    s.sqs.change_message_visibility(QueueUrl=s.queue_url, ReceiptHandle=m["ReceiptHandle"],
                                    VisibilityTimeout=delay)
    return f"attempt {attempt} failed ({describe(error)}); retry {attempt}/{MAX_RETRIES} in {delay}s"


def ack_before_commit(s, m, ev, lock):
    """ack-before-commit: DeleteMessage before COMMIT (a crash in between loses the event)."""
    try:
        claimed = claim(s, ev)
        if claimed:
            pay(s, ev, guarded=True)
        s.delete(m)
        s.db.commit()
        release(s, lock)
    except Exception as e:
        return fail(s, m, e, lock)
    return ("payout created" if claimed else "duplicate, no effect") + " (deleted before commit)"


def on_delivery(s, m):
    try:
        ev = parse(m["Body"])
    except (ValueError, KeyError, TypeError) as e:
        if SYSTEM != "reference":
            raise  # the mutants leave a malformed message to be redelivered
        return park(s, m, f"malformed PaymentCaptured: {e}", None)
    lock = (f"payment-captured.{ev['event_id']}", ev["lock_token"])  # the producer's DeduplicateStamp
    if SYSTEM == "ack-before-commit":
        return ack_before_commit(s, m, ev, lock)
    try:
        result = (check_then_insert if SYSTEM == "check-then-insert" else handle)(s, ev)
    except Exception as e:
        return fail(s, m, e, lock)
    release(s, lock)
    s.delete(m)
    return result


def main():
    if SYSTEM not in ("reference", "check-then-insert", "ack-before-commit"):
        sys.exit(f"{WORKER}: unknown CRASHPOINT_SYSTEM {SYSTEM!r}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    s = Services()
    print(f"{WORKER}: {SYSTEM} consumer on {s.queue_url}", flush=True)
    try:
        while True:
            if s.db.closed:
                s.db = s.connect()
            try:
                out = s.sqs.receive_message(QueueUrl=s.queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=20,
                                            MessageSystemAttributeNames=["ApproximateReceiveCount"])
            except Exception as e:
                print(f"{WORKER}: receive failed: {describe(e)}", flush=True)
                continue
            for m in out.get("Messages", []):
                try:
                    result = on_delivery(s, m)
                except Exception as e:  # as the Rust worker loop: note it, roll back, go on
                    result = f"error: {describe(e)}"
                    try:
                        s.db.rollback()
                    except psycopg.Error:
                        pass
                print(f"{WORKER}: {m['MessageId']} (receive {receive_count(m)}): {result}", flush=True)
    finally:
        s.db.close()


if __name__ == "__main__":
    main()
