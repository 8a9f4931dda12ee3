'use strict';
/**
 * The variants of the payment demo (`CRASHPOINT_SYSTEM`), shared by both of its processes: the
 * payment worker (worker.js) and the webhook endpoint (webhooks.js). Each process is the
 * reference in the variants that are not its own (webhook-no-dedup is the endpoint's, the others
 * the worker's). The workload file's [systems.*] tables name the same ones.
 */
module.exports = {
  SYSTEMS: [
    'reference',
    'new-key-per-attempt',
    'no-key',
    'timeout-as-failure',
    'charge-timeout-as-failure',
    'no-local-check',
    'webhook-no-dedup',
  ],
};
