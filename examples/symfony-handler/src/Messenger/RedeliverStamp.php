<?php

declare(strict_types=1);

namespace App\Messenger;

use Symfony\Component\Messenger\Stamp\NonSendableStampInterface;

/**
 * Set by {@see SqsRetryListener} on a failed message that is retried by SQS redelivery:
 * {@see RedeliveringReceiver::reject()} then keeps the message on the queue instead of
 * deleting it, visible again after $delaySeconds (ChangeMessageVisibility), or after the
 * queue's visibility timeout when null (no call at all).
 */
final class RedeliverStamp implements NonSendableStampInterface
{
    public function __construct(public readonly ?int $delaySeconds)
    {
    }
}
