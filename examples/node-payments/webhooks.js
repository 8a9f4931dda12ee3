'use strict';
/**
 * crashpoint's demo webhook endpoint: the card processor calls it back with a
 * `payment_intent.succeeded` event for every charge it applies, and it credits the merchant's
 * ledger with the charge, once per charge.
 *
 * Stripe delivers each event at least once, retries a delivery that was not answered with a 2xx,
 * and may deliver events out of order ("Best practices for using webhooks": handle duplicate
 * events by logging the event ids you have processed). The reference does that: in one
 * transaction it records the event id in `processed_event` (its primary key is the dedup) and,
 * only when that row is new, inserts the ledger entry; it answers 200 after COMMIT. The variant
 * `webhook-no-dedup` credits on every delivery.
 *
 * It is a plain Node.js `http` server on the port crashpoint hands it in CARDS_WEBHOOK_PORT, with
 * one PostgreSQL connection (node-postgres); crashpoint POSTs each event to /webhooks/cards as
 * JSON, holds each statement of the handler until its scheduler grants it, and may SIGKILL the
 * process between two of them (the delivery then counts as failed and is made again). Each
 * statement starts with `/* crashpoint:<label> *\/`, the name crashpoint's trace gives it.
 * Signatures (`Stripe-Signature`) are not checked: the declared processor does not sign.
 */
const http = require('http');
const pg = require('pg');

const { SYSTEMS } = require('./systems');

const BEGIN = '/* crashpoint:begin */ BEGIN';
const COMMIT = '/* crashpoint:commit */ COMMIT';
const ROLLBACK = '/* crashpoint:rollback */ ROLLBACK';
const MARK = '/* crashpoint:mark_event */ INSERT INTO processed_event (event_id) VALUES ($1) ON CONFLICT (event_id) DO NOTHING';
const CREDIT =
  '/* crashpoint:credit */ INSERT INTO ledger (order_id, intent_id, amount_minor, event_id) VALUES ($1, $2, $3, $4)';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The charge a `payment_intent.succeeded` event reports: {eventId, intentId, orderId, amountMinor},
 * or null for another event type. Throws on a malformed event (answered 400: the processor
 * retries it, and a person looks at it).
 */
function parseEvent(body) {
  const e = JSON.parse(body);
  if (e === null || typeof e !== 'object' || typeof e.id !== 'string' || !e.id) throw new Error('an event has a string id');
  if (e.type !== 'payment_intent.succeeded') return null;
  const pi = e.data && e.data.object;
  if (!pi || typeof pi.id !== 'string') throw new Error(`${e.id}: data.object is not a payment intent`);
  const orderId = pi.metadata && pi.metadata.order_id;
  if (typeof orderId !== 'string' || !UUID.test(orderId)) throw new Error(`${e.id}: metadata.order_id must be a UUID`);
  // Form-encoded charges arrive with their amount as a string ("1000").
  const amountMinor = Number(pi.amount);
  if (!Number.isSafeInteger(amountMinor) || amountMinor <= 0) throw new Error(`${e.id}: amount must be a positive integer`);
  return { eventId: e.id, intentId: pi.id, orderId, amountMinor };
}

/**
 * The endpoint's handler: credits the ledger for `ev` in one transaction on `db` (a pg.Pool);
 * resolves with what it did.
 */
async function credit(db, system, ev) {
  const client = await db.connect();
  try {
    await client.query(BEGIN);
    if (system !== 'webhook-no-dedup') {
      const fresh = (await client.query(MARK, [ev.eventId])).rowCount === 1;
      if (!fresh) {
        await client.query(COMMIT);
        return `${ev.eventId} seen before, no effect`;
      }
    }
    await client.query(CREDIT, [ev.orderId, ev.intentId, ev.amountMinor, ev.eventId]);
    await client.query(COMMIT);
    return `${ev.eventId}: ${ev.intentId} credited`;
  } catch (e) {
    await client.query(ROLLBACK).catch(() => {});
    throw e;
  } finally {
    client.release();
  }
}

function main() {
  const name = process.env.CRASHPOINT_WORKER || 'node-payments-webhooks';
  const system = process.env.CRASHPOINT_SYSTEM || 'reference';
  const fatal = (what) => {
    console.error(`${name}: ${what}`);
    process.exit(2);
  };
  if (!SYSTEMS.includes(system)) fatal(`unknown CRASHPOINT_SYSTEM ${JSON.stringify(system)}; expected one of ${SYSTEMS.join(', ')}`);
  const port = Number(process.env.CARDS_WEBHOOK_PORT);
  if (!Number.isInteger(port) || port <= 0 || port > 65535) fatal('CARDS_WEBHOOK_PORT must be a TCP port');
  if (!process.env.DATABASE_URL) fatal('environment variable DATABASE_URL is not set');
  const db = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 1 });
  db.on('error', (e) => console.error(`${name}: idle postgres connection error: ${e.message}`));

  const server = http.createServer((req, res) => {
    const answer = (status, text) => {
      res.writeHead(status, { 'content-type': 'text/plain' });
      res.end(text);
    };
    if (req.method !== 'POST' || req.url !== '/webhooks/cards') return answer(404, 'no such endpoint');
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      let ev;
      try {
        ev = parseEvent(Buffer.concat(chunks).toString('utf8'));
      } catch (e) {
        console.error(`${name}: ${e.message}`);
        return answer(400, e.message);
      }
      if (ev === null) return answer(200, 'ignored');
      try {
        const what = await credit(db, system, ev);
        console.log(`${name}: ${what}`);
        answer(200, 'ok');
      } catch (e) {
        // Not acknowledged: the processor delivers the event again later.
        console.error(`${name}: ${ev.eventId}: ${e.message}`);
        answer(500, 'retry later');
      }
    });
  });
  process.on('SIGTERM', () => process.exit(0));
  server.listen(port, '127.0.0.1', () => console.log(`${name}: ${system} webhook endpoint on 127.0.0.1:${port}`));
}

module.exports = { parseEvent, credit, SYSTEMS };

if (require.main === module) main();
