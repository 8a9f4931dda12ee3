<?php

declare(strict_types=1);

namespace App\Messenger;

use Symfony\Component\Messenger\Stamp\StampInterface;

/**
 * The key and lease of a message's dispatch lock: the stamp the payout article attaches with Symfony
 * 7.3's `DeduplicateStamp(key: 'payment-captured.'.$eventId, ttl: 900)`, which Messenger 5.4
 * does not have. `token` is the value the producer stored under the key (Symfony's lock Key
 * carries it), so that the consumer releases only that lock; null when the message has none.
 */
final class DeduplicateStamp implements StampInterface
{
    public function __construct(
        public readonly string $key,
        public readonly int $ttl = 300,
        public readonly ?string $token = null,
    ) {
    }
}
