'use strict';
/**
 * crashpoint's demo Node.js worker: an SQS consumer that issues one invoice per completed order.
 *
 * It consumes OrderCompleted messages ({"eventId", "orderId", "amountMinor", "currency"}) with
 * sqs-consumer and writes the invoice in PostgreSQL with node-postgres, in the configuration a
 * team runs in production: ten messages per receive handled in parallel (`batchSize: 10`), a
 * receive-time `visibilityTimeout` kept alive by a `heartbeatInterval`, a pg.Pool, and ioredis
 * with its default options (a metrics counter per invoice issued). Each invoice issued is
 * published as InvoiceIssued to a second queue, invoice-events, which another team consumes.
 * crashpoint runs it behind
 * gating proxies that hold every PostgreSQL statement, SQS request and Redis command until its
 * scheduler grants it, and may SIGKILL it between two calls; the workload file declares the role
 * `concurrent = true`, so that each call in flight is a choice of the scheduler's. The worker:
 * - waits as long as it takes for a reply (one-hour HTTP timeouts, few SDK attempts);
 * - never reads its own clock or randomness in SQL: `now()` follows crashpoint's logical clock.
 *
 * CRASHPOINT_SYSTEM picks the variant: reference, ack-before-commit, check-then-insert,
 * batch-check-then-insert, batch-delete-all, publish-once, lock-then-check, lock-and-unique, redis-dedup-first or redis-dedup-after
 * (README.md). CRASHPOINT_CONFIG (the scenario's [config], JSON) may set
 * batchSize, visibilityTimeout and heartbeatInterval (s); the defaults are the production ones.
 * Each statement but BEGIN/COMMIT/ROLLBACK starts with `/* crashpoint:<label> *\/`, the name
 * crashpoint's trace gives it.
 */
// The AWS SDK warns on every start under Node.js < 22 that its releases after January 2027 will
// need 22; the versions package-lock.json pins run on 20. Keep stderr for the worker's own lines.
if (process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED === undefined) {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';
}
const { Consumer } = require('sqs-consumer');
const { SQSClient, DeleteMessageCommand, SendMessageCommand } = require('@aws-sdk/client-sqs');
const { NodeHttpHandler } = require('@smithy/node-http-handler');
const pg = require('pg');
const Redis = require('ioredis');

const SYSTEMS = [
  'reference',
  'ack-before-commit',
  'check-then-insert',
  'batch-check-then-insert',
  'batch-delete-all',
  'publish-once',
  'lock-then-check',
  'lock-and-unique',
  'redis-dedup-first',
  'redis-dedup-after',
];

/** lock-then-check, lock-and-unique: how long a handler's per-order lock lives in Redis, ms. */
const ORDER_LOCK_TTL_MS = 30_000;

/** Deletes a lock only if it still holds the caller's token (the Redis documentation's release). */
const RELEASE_IF_MINE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/** The production settings; CRASHPOINT_CONFIG may override each. */
const PRODUCTION = { batchSize: 10, visibilityTimeout: 30, heartbeatInterval: 10 };

const CLAIM =
  '/* crashpoint:claim */ INSERT INTO inbox (message_id) VALUES ($1) ON CONFLICT DO NOTHING RETURNING message_id';
const INSERT_INVOICE =
  '/* crashpoint:insert_invoice */ INSERT INTO invoice (order_id, amount_minor, currency) VALUES ($1, $2, $3)';
// Two events of one order (a producer that retried with a new event id): the order's one
// invoice is already there, or is being inserted by a transaction in parallel.
const INSERT_INVOICE_ONCE = `${INSERT_INVOICE} ON CONFLICT (order_id) DO NOTHING`;
const CHECK = '/* crashpoint:check */ SELECT 1 FROM invoice WHERE order_id = $1';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The OrderCompleted event of a message body; throws on a malformed one (left for redelivery). */
function parseOrderCompleted(body) {
  const d = JSON.parse(body);
  if (d === null || typeof d !== 'object') throw new Error('OrderCompleted must be a JSON object');
  for (const k of ['eventId', 'orderId']) {
    if (typeof d[k] !== 'string' || !UUID.test(d[k])) throw new Error(`OrderCompleted.${k} must be a UUID`);
  }
  if (!Number.isSafeInteger(d.amountMinor)) throw new Error('OrderCompleted.amountMinor must be an integer');
  if (typeof d.currency !== 'string' || d.currency === '') throw new Error('OrderCompleted.currency must be a string');
  return { eventId: d.eventId, orderId: d.orderId, amountMinor: d.amountMinor, currency: d.currency };
}

/**
 * The worker's handler. `pool` is a pg.Pool (each message takes a client of its own, so the ten
 * messages of a batch run in ten transactions at once); `sqs` needs only `send(command)`;
 * `redis` needs only `incr(key)`; `log(line)` prints one line.
 */
function createWorker({ system, name, pool, queueUrl, eventsUrl, sqs, redis, log = (line) => console.log(line) }) {
  if (!SYSTEMS.includes(system)) throw new Error(`unknown CRASHPOINT_SYSTEM ${JSON.stringify(system)}`);

  async function deleteMessage(message) {
    await sqs.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: message.ReceiptHandle }));
  }

  /**
   * Publishes InvoiceIssued to the invoice-events queue, which the accounting team consumes
   * (crashpoint declares it `outbound = true`). At least once: after the COMMIT that issued the
   * invoice, and again whenever a redelivered event finds it issued (the first publish may have
   * been lost to a crash between COMMIT and SendMessage); consumers deduplicate by orderId.
   */
  async function publishIssued(ev) {
    const body = JSON.stringify({ type: 'InvoiceIssued', orderId: ev.orderId, eventId: ev.eventId });
    await sqs.send(new SendMessageCommand({ QueueUrl: eventsUrl, MessageBody: body }));
  }

  /** reference and ack-before-commit: claim the event in the inbox, then the order's invoice. */
  async function claimAndInvoice(db, ev, message) {
    const claimed = (await db.query(CLAIM, [ev.eventId])).rowCount === 1;
    if (!claimed) {
      await db.query('COMMIT');
      // Again: the first publish may have been lost. publish-once's defect: it trusts the first.
      if (system !== 'publish-once') await publishIssued(ev);
      if (system === 'ack-before-commit') await deleteMessage(message); // sqs-consumer does not delete here
      return 'duplicate, no effect';
    }
    const inserted = (await db.query(INSERT_INVOICE_ONCE, [ev.orderId, ev.amountMinor, ev.currency])).rowCount === 1;
    if (system === 'ack-before-commit') {
      // The defect: the message is acknowledged before the transaction commits, so a crash in
      // between loses the event (no invoice, no redelivery).
      await deleteMessage(message);
      await db.query('COMMIT');
      await publishIssued(ev);
      return 'invoice issued (deleted before commit)';
    }
    await db.query('COMMIT');
    await publishIssued(ev);
    return inserted ? 'invoice issued' : 'order already invoiced (another event of it), no effect';
  }

  /**
   * check-then-insert: no claim, SELECT then an unguarded INSERT. batch-check-then-insert: the
   * inbox claim first (a redelivered event is a duplicate), then the same SELECT and INSERT, which
   * is right one message at a time and wrong when two events of one order run in parallel.
   * `guard` runs the SELECT, INSERT and COMMIT (under a lock, for the lock variants).
   */
  async function checkThenInsert(db, ev, { claim = system === 'batch-check-then-insert', guard = (work) => work() } = {}) {
    if (claim && (await db.query(CLAIM, [ev.eventId])).rowCount === 0) {
      await db.query('COMMIT');
      await publishIssued(ev);
      return 'duplicate, no effect';
    }
    const existed = await guard(async () => {
      const found = (await db.query(CHECK, [ev.orderId])).rowCount > 0;
      if (!found) await db.query(INSERT_INVOICE, [ev.orderId, ev.amountMinor, ev.currency]);
      await db.query('COMMIT');
      return found;
    });
    await publishIssued(ev);
    return existed ? 'invoice exists, no effect' : 'invoice issued';
  }

  /**
   * Runs `work` under the order's Redis lock (`SET invoice-lock:<order> <event> PX … NX`), then
   * `release`s it; a lock held by another handler is an error (the message comes back after its
   * visibility timeout).
   */
  async function underOrderLock(ev, release, work) {
    const lock = `invoice-lock:${ev.orderId}`;
    if ((await redis.set(lock, ev.eventId, 'PX', ORDER_LOCK_TTL_MS, 'NX')) !== 'OK') {
      throw new Error(`order ${ev.orderId} is being invoiced by another handler: left for redelivery`);
    }
    try {
      return await work();
    } finally {
      await release(lock);
    }
  }

  /**
   * lock-then-check: the inbox claim, then check-then-insert's SELECT and INSERT under a per-order
   * Redis lock released with a plain DEL, on a schema without UNIQUE (order_id). Right while the
   * lock holds; two invoices when it is lost (a failover, its TTL passing during a pause) while
   * its holder is between its check and its insert, and another event of the order takes it.
   *
   * lock-and-unique: the same on the schema with UNIQUE (order_id), the lock released only by its
   * holder. A lost lock lets a second handler in, and the constraint stops its insert (or the
   * first's): that transaction rolls back, its message comes back and finds the invoice.
   * Harmless: the lock only saves work.
   */
  async function lockThenCheck(db, ev) {
    const release =
      system === 'lock-and-unique'
        ? (lock) => redis.eval(RELEASE_IF_MINE, 1, lock, ev.eventId)
        : (lock) => redis.del(lock);
    return checkThenInsert(db, ev, { claim: true, guard: (work) => underOrderLock(ev, release, work) });
  }

  /**
   * sqs-consumer's handleMessage, called for the messages of a batch in parallel: resolves with
   * the message (sqs-consumer then deletes it, except in ack-before-commit, see
   * `shouldDeleteMessages`), or throws (it does not delete; the message comes back after its
   * visibility timeout).
   */
  async function handleMessage(message) {
    const ev = parseOrderCompleted(message.Body);
    // A per-event marker in Redis (no expiry): redis-dedup-first takes it before the transaction,
    // so a crash or an error between the marker and COMMIT makes the redelivery skip an event
    // whose invoice never committed. redis-dedup-after (harmless) sets it once the invoice is
    // committed and published, and only reads it first: a fast path for duplicates.
    const marker = `invoice-done:${ev.eventId}`;
    const firstTake = system === 'redis-dedup-first' && (await redis.set(marker, '1', 'NX')) !== 'OK';
    if (firstTake || (system === 'redis-dedup-after' && (await redis.get(marker)) !== null)) {
      log(`${name}: ${ev.eventId}: marked done in Redis, skipped`);
      return message;
    }
    const db = await pool.connect();
    let broken = false;
    // A checked-out client's connection error (a connection reset, a lost COMMIT reply) reaches
    // its own listener, not the pool's: without one Node.js ends the process.
    const onError = (e) => {
      broken = true;
      console.error(`${name}: postgres connection error: ${e.message}`);
    };
    db.on('error', onError);
    try {
      await db.query('BEGIN');
      const checks = system === 'check-then-insert' || system === 'batch-check-then-insert';
      // batch-delete-all handles each message as the reference does.
      const result =
        system === 'lock-then-check' || system === 'lock-and-unique'
          ? await lockThenCheck(db, ev)
          : checks
            ? await checkThenInsert(db, ev)
            : await claimAndInvoice(db, ev, message);
      if (result.startsWith('invoice issued')) await redis.incr('invoices_issued');
      if (system === 'redis-dedup-after') await redis.set(marker, '1');
      log(`${name}: ${ev.eventId}: ${result}`);
      return message;
    } catch (e) {
      try {
        await db.query('ROLLBACK');
      } catch (_) {
        broken = true; // no reply to ROLLBACK: the connection is gone, the pool drops it
      }
      throw e;
    } finally {
      db.off('error', onError);
      db.release(broken);
    }
  }

  /**
   * batch-delete-all: sqs-consumer's handleMessageBatch, each message handled as the reference
   * does, in parallel. The defect: it resolves with every message of the batch, so sqs-consumer
   * deletes them all (DeleteMessageBatch), those whose handler failed included: their events are
   * lost. The right batch handler resolves with the messages whose handler succeeded.
   */
  async function handleMessageBatch(messages) {
    const results = await Promise.allSettled(messages.map((m) => handleMessage(m)));
    for (const r of results) if (r.status === 'rejected') console.error(`${name}: ${r.reason}`);
    return messages;
  }

  return { handleMessage, handleMessageBatch };
}

function env(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`${process.env.CRASHPOINT_WORKER || 'node-invoices'}: environment variable ${name} is not set`);
    process.exit(2);
  }
  return v;
}

async function main() {
  const name = process.env.CRASHPOINT_WORKER || 'node-invoices';
  const system = process.env.CRASHPOINT_SYSTEM || 'reference';
  if (!SYSTEMS.includes(system)) {
    console.error(`${name}: unknown CRASHPOINT_SYSTEM ${JSON.stringify(system)}`);
    process.exit(2);
  }
  const queueUrl = env('CRASHPOINT_QUEUE_URL');
  const eventsUrl = env('CRASHPOINT_QUEUE_URL_INVOICE_EVENTS'); // the outbound queue invoice-events
  const sqs = new SQSClient({
    // Region and credentials come from AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY.
    endpoint: env('AWS_ENDPOINT_URL_SQS'),
    maxAttempts: 3,
    // crashpoint holds each request until its scheduler grants it: wait up to an hour.
    requestHandler: new NodeHttpHandler({
      connectionTimeout: 3600_000,
      requestTimeout: 3600_000,
      socketTimeout: 3600_000,
    }),
  });
  const config = { ...PRODUCTION, ...JSON.parse(process.env.CRASHPOINT_CONFIG || '{}') };
  // node-postgres reads `options` (and every other query parameter) from the URI and sends it in
  // the startup message, as libpq does: the search_path of crashpoint's schema applies.
  const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: config.batchSize });
  pool.on('error', (e) => console.error(`${name}: idle postgres connection error: ${e.message}`));
  const redis = new Redis(env('REDIS_URL')); // ioredis, default options
  redis.on('error', (e) => console.error(`${name}: redis error: ${e.message}`));
  const worker = createWorker({ system, name, pool, queueUrl, eventsUrl, sqs, redis });

  const consumer = Consumer.create({
    queueUrl,
    sqs,
    // batch-delete-all hands sqs-consumer the whole batch (handleMessageBatch, DeleteMessageBatch,
    // heartbeats by ChangeMessageVisibilityBatch); the others one message at a time, in parallel.
    ...(system === 'batch-delete-all'
      ? { handleMessageBatch: worker.handleMessageBatch }
      : { handleMessage: worker.handleMessage }),
    batchSize: config.batchSize,
    visibilityTimeout: config.visibilityTimeout,
    heartbeatInterval: config.heartbeatInterval,
    // ack-before-commit deletes the message itself inside handleMessage, so sqs-consumer must not
    // delete it a second time; the other variants leave the DeleteMessage to sqs-consumer.
    shouldDeleteMessages: system !== 'ack-before-commit',
  });
  consumer.on('error', (e) => console.error(`${name}: sqs error: ${e.message}`));
  consumer.on('processing_error', (e) => console.error(`${name}: ${e.message}`));
  consumer.on('timeout_error', (e) => console.error(`${name}: ${e.message}`));

  process.on('SIGTERM', () => process.exit(0));
  console.log(`${name}: ${system} consumer on ${queueUrl}`);
  consumer.start();
}

module.exports = { createWorker, parseOrderCompleted, CLAIM, INSERT_INVOICE, INSERT_INVOICE_ONCE, CHECK, PRODUCTION };

if (require.main === module) {
  main().catch((e) => {
    console.error(`${process.env.CRASHPOINT_WORKER || 'node-invoices'}: ${e.stack || e}`);
    process.exit(1);
  });
}
