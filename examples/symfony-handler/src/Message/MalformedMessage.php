<?php

declare(strict_types=1);

namespace App\Message;

/**
 * A queue body that is not a valid PaymentCaptured. Messenger's own serializers throw
 * MessageDecodingFailedException, and the SQS receiver then deletes the message without a
 * trace; here it is handled instead, by a handler that throws an unrecoverable exception, so
 * that the message is parked in the failure transport (as crashpoint's Rust consumer does).
 */
final readonly class MalformedMessage
{
    public function __construct(
        public string $body,
        public string $error,
    ) {
    }
}
