'use strict';
/**
 * crashpoint's demo Node.js payment worker: an SQS consumer that charges each order once, with
 * the real Stripe SDK, against a card processor crashpoint declares and serves on a loopback port.
 *
 * It consumes PaymentRequested messages ({"eventId", "orderId", "amountMinor", "currency"}) with
 * sqs-consumer, one at a time (`batchSize: 1`, no heartbeat), charges the order through
 * stripe-node (`stripe.paymentIntents.create`, confirmed at once with a saved card) and records
 * the payment in PostgreSQL with node-postgres. The reference follows the orders article: the
 * stable operation id is the idempotency key, and a retry first looks the operation up, since an
 * earlier attempt may have been applied with its response lost and its key may have expired since
 * (Stripe keeps keys 24 h):
 *   (a) `check`: the order's payment row; 'paid' means done;
 *   (b) `charge_search`: a PaymentIntent whose metadata.order_id is the order (Stripe's search);
 *   (c) `charge`: else create one, Idempotency-Key `order-<orderId>`, metadata {order_id};
 *   (d) `record`: INSERT the payment 'paid', ON CONFLICT (order_id) DO NOTHING.
 * Then the handler resolves and sqs-consumer deletes the message. An error from Stripe (a
 * connection closed without a response, a 5xx, an idempotency_error) or PostgreSQL throws: the
 * message is not deleted and comes back after its visibility timeout. That redelivery is the
 * retry (`maxNetworkRetries: 0`); stripe-node still retries a closed connection once by itself,
 * 0.5 s later with the same Idempotency-Key (README.md, "What had to be declared for the SDK").
 *
 * crashpoint runs it behind gating proxies that hold every PostgreSQL statement, SQS request and
 * HTTP request to the card processor until its scheduler grants it, and may SIGKILL it between
 * two calls. The role makes one call at a time (not `concurrent`). The worker:
 * - waits as long as it takes for a reply (one-hour timeouts for SQS and Stripe, few attempts);
 * - never reads its own clock in SQL (its statements use no now() at all);
 * - sends no telemetry (`telemetry: false`: stripe-node would otherwise write a telemetry id
 *   under ~/.config/stripe and time each request in a header of the next).
 *
 * CARDS_API_BASE is the card processor, http://127.0.0.1:<port> (crashpoint's provider `cards`).
 * CRASHPOINT_SYSTEM picks the variant: reference, new-key-per-attempt, no-key, timeout-as-failure
 * or no-local-check (README.md). Each statement starts with `/* crashpoint:<label> *\/`, the
 * name crashpoint's trace gives it; the HTTP calls are named by the routes of the workload file.
 */
// The AWS SDK warns on every start under Node.js < 22 that its releases after January 2027 will
// need 22; the versions package-lock.json pins run on 20. Keep stderr for the worker's own lines.
if (process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED === undefined) {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';
}
const crypto = require('crypto');
const { Consumer } = require('sqs-consumer');
const { SQSClient } = require('@aws-sdk/client-sqs');
const { NodeHttpHandler } = require('@smithy/node-http-handler');
const pg = require('pg');
const Stripe = require('stripe');

const { SYSTEMS } = require('./systems');
/** The variants that look the order's charge up before creating one (step (b)). */
const SEARCHES = ['reference', 'timeout-as-failure', 'charge-timeout-as-failure', 'no-local-check', 'webhook-no-dedup'];

const CHECK = '/* crashpoint:check */ SELECT status FROM payment WHERE order_id = $1';
const RECORD_PAID =
  "/* crashpoint:record */ INSERT INTO payment (order_id, intent_id, amount_minor, status) VALUES ($1, $2, $3, 'paid') ON CONFLICT (order_id) DO NOTHING";
// A decline: the order is not charged, and the message is done with.
const RECORD_FAILED =
  "/* crashpoint:record_failed */ INSERT INTO payment (order_id, intent_id, amount_minor, status) VALUES ($1, $2, $3, 'failed') ON CONFLICT (order_id) DO NOTHING";

/**
 * Any API key will do for the declared processor, which ignores `Authorization`. A fixed one, so
 * that a real key in the environment of whoever runs crashpoint is never sent anywhere.
 */
const API_KEY = 'sk_test_crashpoint';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The PaymentRequested event of a message body; throws on a malformed one (left for redelivery). */
function parsePaymentRequested(body) {
  const d = JSON.parse(body);
  if (d === null || typeof d !== 'object') throw new Error('PaymentRequested must be a JSON object');
  for (const k of ['eventId', 'orderId']) {
    if (typeof d[k] !== 'string' || !UUID.test(d[k])) throw new Error(`PaymentRequested.${k} must be a UUID`);
  }
  if (!Number.isSafeInteger(d.amountMinor) || d.amountMinor <= 0) {
    throw new Error('PaymentRequested.amountMinor must be a positive integer');
  }
  if (typeof d.currency !== 'string' || !/^[a-z]{3}$/i.test(d.currency)) {
    throw new Error('PaymentRequested.currency must be an ISO 4217 code');
  }
  return { eventId: d.eventId, orderId: d.orderId, amountMinor: d.amountMinor, currency: d.currency.toLowerCase() };
}

/**
 * A stripe-node client for the API at `base` (http://127.0.0.1:<port>): stripe-node takes a host,
 * a port and a protocol, not a URL, and always puts its paths (/v1/…) at the root. No retries of
 * its own (the redelivery is the retry), an hour's timeout (crashpoint holds a request until its
 * scheduler grants it), no telemetry. Throws on a base that is not http(s)://host[:port][/].
 */
function stripeClient(base, apiKey = API_KEY) {
  let url;
  try {
    url = new URL(base);
  } catch (_) {
    throw new Error(`CARDS_API_BASE must be a URL such as http://127.0.0.1:8080, found ${JSON.stringify(base)}`);
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.pathname !== '/' || url.search || url.username) {
    throw new Error(`CARDS_API_BASE must be http(s)://host[:port] with no path, found ${JSON.stringify(base)}`);
  }
  const protocol = url.protocol.slice(0, -1);
  return new Stripe(apiKey, {
    host: url.hostname.replace(/^\[(.*)\]$/, '$1'), // an IPv6 literal without its brackets
    port: Number(url.port) || (protocol === 'https' ? 443 : 80),
    protocol,
    maxNetworkRetries: 0,
    timeout: 3600_000,
    telemetry: false,
  });
}

/**
 * The worker's handler. `db` needs only `query(text, values)` (a pg.Pool of one connection);
 * `stripe` is a stripe-node client; `log(line)` prints one line.
 */
function createWorker({ system, name, db, stripe, log = (line) => console.log(line) }) {
  if (!SYSTEMS.includes(system)) throw new Error(`unknown CRASHPOINT_SYSTEM ${JSON.stringify(system)}`);

  /** (b) The order's PaymentIntent, found by its metadata (Stripe's search), or null. */
  async function findCharge(orderId) {
    // orderId is a UUID (parsePaymentRequested): nothing to escape in the query.
    const result = await stripe.paymentIntents.search({ query: `metadata['order_id']:'${orderId}'` });
    const found = Array.isArray(result.data) ? result.data : [];
    return found.find((pi) => pi.status === 'succeeded') || found[0] || null;
  }

  /** (c) A new PaymentIntent for the order, confirmed at once with the customer's saved card. */
  function charge(ev) {
    const params = {
      amount: ev.amountMinor,
      currency: ev.currency,
      metadata: { order_id: ev.orderId },
      confirm: true,
      payment_method: 'pm_card_visa',
      // A server-side charge: no redirect-based payment method, so no return_url (real Stripe
      // refuses confirm=true without one while redirects are allowed).
      automatic_payment_methods: { enabled: true, allow_redirects: 'never' },
    };
    switch (system) {
      case 'no-key':
        // The defect: no key of the operation's. stripe-node still sends one of its own,
        // `stripe-node-retry-<uuid4>`, new for every create.
        return stripe.paymentIntents.create(params);
      case 'new-key-per-attempt':
        // The defect: a key per attempt, so a redelivery is a new charge to the processor.
        return stripe.paymentIntents.create(params, { idempotencyKey: crypto.randomUUID() });
      default:
        // The business operation's id: every attempt and every redelivery of it reuses it.
        return stripe.paymentIntents.create(params, { idempotencyKey: `order-${ev.orderId}` });
    }
  }

  /**
   * sqs-consumer's handleMessage: resolves with the message (sqs-consumer then deletes it), or
   * throws (it does not delete; the message comes back after its visibility timeout).
   */
  async function handleMessage(message) {
    const ev = parsePaymentRequested(message.Body);
    const done = (what) => {
      log(`${name}: ${ev.eventId}: ${what}`);
      return message;
    };
    // (a) no-local-check skips it: the search and the key still keep the order charged once.
    if (system !== 'no-local-check') {
      const { rows } = await db.query(CHECK, [ev.orderId]);
      if (rows.length > 0 && rows[0].status === 'paid') return done('order already paid, no effect');
    }
    // (b) and (c), the Stripe part of the payment. A decline (402, StripeCardError) is an
    // answer: the order is not charged. A closed connection is no answer: the charge may have
    // been applied, or may still be made by a retry. timeout-as-failure's defect is to take it
    // for a decline, as a handler does whose payment step catches the SDK's errors around the
    // whole of it: the message is deleted with the order failed while the card may be charged,
    // or while a retry would have charged it.
    // charge-timeout-as-failure's defect is the same, narrower: its `try` wraps the charge alone,
    // so only a connection error on the charge itself is taken for a decline.
    let intent = null;
    let found = false;
    const narrow = system === 'charge-timeout-as-failure';
    if (narrow) {
      intent = await findCharge(ev.orderId);
      found = intent !== null;
    }
    try {
      if (!narrow) {
        intent = SEARCHES.includes(system) ? await findCharge(ev.orderId) : null;
        found = intent !== null;
      }
      if (!found) intent = await charge(ev);
    } catch (e) {
      const timeoutAsFailure = system === 'timeout-as-failure' || narrow;
      const declined =
        e instanceof Stripe.errors.StripeCardError ||
        (timeoutAsFailure && e instanceof Stripe.errors.StripeConnectionError);
      if (!declined) throw e;
      const intentId = (e.payment_intent && e.payment_intent.id) || 'none';
      await db.query(RECORD_FAILED, [ev.orderId, intentId, ev.amountMinor]);
      return done(`payment failed (${e.type}: ${e.message}), recorded as failed`);
    }
    if (!intent || typeof intent.id !== 'string' || intent.status !== 'succeeded') {
      throw new Error(`payment intent ${intent && intent.id} is ${intent && intent.status}, not succeeded`);
    }
    const inserted = (await db.query(RECORD_PAID, [ev.orderId, intent.id, ev.amountMinor])).rowCount === 1;
    const how = found ? 'found by search' : 'charged';
    return done(`${intent.id} ${how}, ${inserted ? 'recorded as paid' : 'payment row already there'}`);
  }

  return { handleMessage };
}

/** Ends the process with status 2 and one line naming what is wrong (a startup error). */
function fatal(name, what) {
  console.error(`${name}: ${what}`);
  process.exit(2);
}

function env(name, variable) {
  const v = process.env[variable];
  if (!v) fatal(name, `environment variable ${variable} is not set`);
  return v;
}

async function main() {
  const name = process.env.CRASHPOINT_WORKER || 'node-payments';
  const system = process.env.CRASHPOINT_SYSTEM || 'reference';
  if (!SYSTEMS.includes(system)) fatal(name, `unknown CRASHPOINT_SYSTEM ${JSON.stringify(system)}; expected one of ${SYSTEMS.join(', ')}`);
  const queueUrl = env(name, 'CRASHPOINT_QUEUE_URL');
  let stripe;
  try {
    stripe = stripeClient(env(name, 'CARDS_API_BASE'));
  } catch (e) {
    fatal(name, e.message);
  }
  const sqs = new SQSClient({
    // Region and credentials come from AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY.
    endpoint: env(name, 'AWS_ENDPOINT_URL_SQS'),
    maxAttempts: 3,
    // crashpoint holds each request until its scheduler grants it: wait up to an hour.
    requestHandler: new NodeHttpHandler({
      connectionTimeout: 3600_000,
      requestTimeout: 3600_000,
      socketTimeout: 3600_000,
    }),
  });
  // One connection: one statement at a time. node-postgres sends the URI's `options`
  // (-csearch_path=…) in its startup message, as libpq does. pool.query releases a client whose
  // query failed as broken, and the pool opens a new one for the next statement.
  const db = new pg.Pool({ connectionString: env(name, 'DATABASE_URL'), max: 1 });
  db.on('error', (e) => console.error(`${name}: idle postgres connection error: ${e.message}`));
  const worker = createWorker({ system, name, db, stripe });

  const consumer = Consumer.create({
    queueUrl,
    sqs,
    handleMessage: worker.handleMessage,
    batchSize: 1, // one message at a time, no heartbeat: the queue's visibility timeout applies
  });
  consumer.on('error', (e) => console.error(`${name}: sqs error: ${e.message}`));
  consumer.on('processing_error', (e) => console.error(`${name}: ${e.message}`));

  process.on('SIGTERM', () => process.exit(0));
  console.log(`${name}: ${system} consumer on ${queueUrl}, card processor ${process.env.CARDS_API_BASE}`);
  consumer.start();
}

module.exports = {
  createWorker,
  parsePaymentRequested,
  stripeClient,
  SYSTEMS,
  CHECK,
  RECORD_PAID,
  RECORD_FAILED,
};

if (require.main === module) {
  main().catch((e) => {
    console.error(`${process.env.CRASHPOINT_WORKER || 'node-payments'}: ${e.stack || e}`);
    process.exit(1);
  });
}
