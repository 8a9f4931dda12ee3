<?php

declare(strict_types=1);

namespace App\Messenger;

use App\Infrastructure\ReceiveCountingSqsClient;
use Symfony\Component\Messenger\Bridge\AmazonSqs\Transport\AmazonSqsReceivedStamp;
use Symfony\Component\Messenger\Envelope;
use Symfony\Component\Messenger\Transport\Receiver\ReceiverInterface;

/**
 * The SQS transport's receiver, with a reject() that can keep the message: the Worker rejects
 * every failed message, and AmazonSqsReceiver::reject() is DeleteMessage. A message stamped
 * with a {@see RedeliverStamp} is instead left on the queue (ChangeMessageVisibility to its
 * delay, or nothing), so that SQS redelivers it: a retry.
 */
final class RedeliveringReceiver implements ReceiverInterface
{
    public function __construct(
        private readonly ReceiverInterface $receiver,
        private readonly ReceiveCountingSqsClient $sqs,
    ) {
    }

    public function get(): iterable
    {
        return $this->receiver->get();
    }

    public function ack(Envelope $envelope): void
    {
        $this->receiver->ack($envelope);
    }

    public function reject(Envelope $envelope): void
    {
        $redeliver = $envelope->last(RedeliverStamp::class);
        if (null === $redeliver) {
            $this->receiver->reject($envelope);

            return;
        }
        $received = $envelope->last(AmazonSqsReceivedStamp::class);
        if (null !== $redeliver->delaySeconds && null !== $received) {
            $this->sqs->changeVisibility($received->getId(), $redeliver->delaySeconds);
        }
    }
}
