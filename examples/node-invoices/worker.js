'use strict';
/**
 * crashpoint's demo Node.js worker: an SQS consumer that issues one invoice per completed order.
 *
 * It consumes OrderCompleted messages ({"eventId", "orderId", "amountMinor", "currency"}) with
 * sqs-consumer (its own polling loop, and its DeleteMessage once handleMessage resolves) and
 * writes the invoice in PostgreSQL with node-postgres. crashpoint runs it behind gating proxies
 * that hold every PostgreSQL statement and every SQS request until its scheduler grants it, and
 * may SIGKILL it between two calls, so the worker:
 * - makes one service call at a time: batchSize 1, no heartbeat, each query awaited in turn;
 * - waits as long as it takes for a reply (one-hour HTTP timeouts, few SDK attempts);
 * - never reads its own clock or randomness in SQL: `now()` follows crashpoint's logical clock;
 * - reconnects to PostgreSQL before the next message when its connection was dropped.
 *
 * CRASHPOINT_SYSTEM picks the variant: reference, ack-before-commit or check-then-insert
 * (README.md). Each statement but BEGIN/COMMIT/ROLLBACK starts with `/* crashpoint:<label> *\/`,
 * the name crashpoint's trace gives it.
 */
// The AWS SDK warns on every start under Node.js < 22 that its releases after January 2027 will
// need 22; the versions package-lock.json pins run on 20. Keep stderr for the worker's own lines.
if (process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED === undefined) {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';
}
const { Consumer } = require('sqs-consumer');
const { SQSClient, DeleteMessageCommand } = require('@aws-sdk/client-sqs');
const { NodeHttpHandler } = require('@smithy/node-http-handler');
const pg = require('pg');

const SYSTEMS = ['reference', 'ack-before-commit', 'check-then-insert'];

const CLAIM =
  '/* crashpoint:claim */ INSERT INTO inbox (message_id) VALUES ($1) ON CONFLICT DO NOTHING RETURNING message_id';
const INSERT_INVOICE =
  '/* crashpoint:insert_invoice */ INSERT INTO invoice (order_id, amount_minor, currency) VALUES ($1, $2, $3)';
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
 * The worker's state and handler.
 * `sqs` needs only `send(command)`; `log(line)` prints one line.
 */
function createWorker({ system, name, databaseUrl, queueUrl, sqs, log = (line) => console.log(line) }) {
  if (!SYSTEMS.includes(system)) throw new Error(`unknown CRASHPOINT_SYSTEM ${JSON.stringify(system)}`);
  let db = null; // the one pg.Client (never a Pool: one connection, one statement at a time)
  let broken = true; // no usable connection: connect a new Client before the next statement

  async function connect() {
    if (db) {
      const old = db;
      db = null;
      old.end().catch(() => {}); // its socket is already closed, or closes now
    }
    // node-postgres reads `options` (and every other query parameter) from the URI and sends it
    // in the startup message, as libpq does: the search_path of crashpoint's schema applies.
    const client = new pg.Client({ connectionString: databaseUrl });
    client.on('error', (e) => {
      if (db === client) broken = true;
      console.error(`${name}: postgres connection error: ${e.message}`);
    });
    client.on('end', () => {
      if (db === client) broken = true;
    });
    await client.connect();
    db = client;
    broken = false;
  }

  const query = (text, values) => db.query(text, values);

  async function rollback() {
    try {
      await db.query('ROLLBACK');
    } catch (e) {
      broken = true; // no reply to ROLLBACK: the connection is gone, reconnect before the next message
    }
  }

  async function deleteMessage(message) {
    await sqs.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: message.ReceiptHandle }));
  }

  /** reference and ack-before-commit: claim the event in the inbox, then the invoice. */
  async function claimAndInvoice(ev, message) {
    const claimed = (await query(CLAIM, [ev.eventId])).rowCount === 1;
    if (!claimed) {
      await query('COMMIT');
      if (system === 'ack-before-commit') await deleteMessage(message); // sqs-consumer does not delete here
      return 'duplicate, no effect';
    }
    await query(INSERT_INVOICE, [ev.orderId, ev.amountMinor, ev.currency]);
    if (system === 'ack-before-commit') {
      // The defect: the message is acknowledged before the transaction commits, so a crash in
      // between loses the event (no invoice, no redelivery).
      await deleteMessage(message);
      await query('COMMIT');
      return 'invoice issued (deleted before commit)';
    }
    await query('COMMIT');
    return 'invoice issued';
  }

  /** check-then-insert: no claim, SELECT then an unguarded INSERT (the race is the defect). */
  async function checkThenInsert(ev) {
    if ((await query(CHECK, [ev.orderId])).rowCount > 0) {
      await query('COMMIT');
      return 'invoice exists, no effect';
    }
    await query(INSERT_INVOICE, [ev.orderId, ev.amountMinor, ev.currency]);
    await query('COMMIT');
    return 'invoice issued';
  }

  /**
   * sqs-consumer's handleMessage: resolves with the message (sqs-consumer then deletes it, except
   * in ack-before-commit, see `shouldDeleteMessages`), or throws (it does not delete; the message
   * comes back after its visibility timeout).
   */
  async function handleMessage(message) {
    const ev = parseOrderCompleted(message.Body);
    if (broken) await connect();
    try {
      await query('BEGIN');
      const result = system === 'check-then-insert' ? await checkThenInsert(ev) : await claimAndInvoice(ev, message);
      log(`${name}: ${ev.eventId}: ${result}`);
      return message;
    } catch (e) {
      if (!broken) await rollback();
      throw e;
    }
  }

  async function close() {
    if (db) await db.end().catch(() => {});
    db = null;
    broken = true;
  }

  return { connect, handleMessage, close };
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
  const worker = createWorker({ system, name, databaseUrl: env('DATABASE_URL'), queueUrl, sqs });
  await worker.connect();

  const consumer = Consumer.create({
    queueUrl,
    sqs,
    handleMessage: worker.handleMessage,
    // batchSize 1 (the default): one message, so one handler and one call, at a time. No
    // visibilityTimeout (a ReceiveMessage VisibilityTimeout would run in real seconds) and no
    // heartbeatInterval (a ChangeMessageVisibility in parallel with the handler's queries).
    batchSize: 1,
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

module.exports = { createWorker, parseOrderCompleted, CLAIM, INSERT_INVOICE, CHECK };

if (require.main === module) {
  main().catch((e) => {
    console.error(`${process.env.CRASHPOINT_WORKER || 'node-invoices'}: ${e.stack || e}`);
    process.exit(1);
  });
}
