<?php

declare(strict_types=1);

namespace App\Infrastructure;

use AsyncAws\Sqs\Enum\MessageSystemAttributeName;
use AsyncAws\Sqs\Result\ReceiveMessageResult;
use AsyncAws\Sqs\SqsClient;

/**
 * async-aws's SqsClient, asking ReceiveMessage for each message's ApproximateReceiveCount.
 *
 * Messenger 5.4's SQS transport asks for message attributes only, so neither the worker nor a
 * proxy reading the reply would see how often a message was delivered. The retry policy
 * counts attempts by it (as crashpoint's Rust reference does), and crashpoint's trace shows
 * it (`m1 (receive 2)`). The client also remembers the queue URL its receives use, for
 * ChangeMessageVisibility.
 */
class ReceiveCountingSqsClient extends SqsClient
{
    private ?ReceiveMessageResult $lastReceive = null;
    private ?string $queueUrl = null;

    public function receiveMessage($input): ReceiveMessageResult
    {
        if (\is_array($input)) {
            $input['AttributeNames'] = [MessageSystemAttributeName::APPROXIMATE_RECEIVE_COUNT];
            $this->queueUrl = $input['QueueUrl'] ?? $this->queueUrl;
        }

        return $this->lastReceive = parent::receiveMessage($input);
    }

    /**
     * ApproximateReceiveCount of the message with $receiptHandle, from the last receive (the
     * transport receives again only when every buffered message was handled); 1 if unknown.
     */
    public function receiveCount(string $receiptHandle): int
    {
        try {
            foreach ($this->lastReceive?->getMessages() ?? [] as $message) {
                if ($message->getReceiptHandle() === $receiptHandle) {
                    return max(1, (int) ($message->getAttributes()[MessageSystemAttributeName::APPROXIMATE_RECEIVE_COUNT] ?? 1));
                }
            }
        } catch (\Throwable) {
            // the last receive failed: nothing to read
        }

        return 1;
    }

    /** ChangeMessageVisibility on the queue this client receives from; waits for the reply. */
    public function changeVisibility(string $receiptHandle, int $seconds): void
    {
        $this->changeMessageVisibility([
            'QueueUrl' => $this->queueUrl ?? throw new \LogicException('no ReceiveMessage yet: the queue URL is unknown'),
            'ReceiptHandle' => $receiptHandle,
            'VisibilityTimeout' => $seconds,
        ])->resolve();
    }
}
