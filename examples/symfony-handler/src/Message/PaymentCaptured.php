<?php

declare(strict_types=1);

namespace App\Message;

/**
 * The payout article's message, verbatim. On the queue it is the plain JSON that crashpoint's producer
 * writes (`event_id`, `payment_id`, `merchant_id`, `amount_minor`, `currency`), decoded by
 * {@see \App\Messenger\PaymentCapturedSerializer}.
 */
final readonly class PaymentCaptured
{
    public function __construct(
        public string $eventId,
        public string $paymentId,
        public string $merchantId,
        public int $amountInMinorUnits,
        public string $currency,
    ) {
    }
}
