<?php

declare(strict_types=1);

namespace App\Messenger;

use App\Infrastructure\ReceiveCountingSqsClient;
use Psr\Log\LoggerInterface;
use Symfony\Component\EventDispatcher\EventSubscriberInterface;
use Symfony\Component\Messenger\Bridge\AmazonSqs\Transport\AmazonSqsReceivedStamp;
use Symfony\Component\Messenger\Envelope;
use Symfony\Component\Messenger\Event\WorkerMessageFailedEvent;
use Symfony\Component\Messenger\Event\WorkerMessageReceivedEvent;
use Symfony\Component\Messenger\Exception\HandlerFailedException;
use Symfony\Component\Messenger\Exception\UnrecoverableExceptionInterface;

/**
 * The retry policy, in place of Messenger's SendFailedMessageForRetryListener.
 *
 * Messenger retries a failed SQS message by sending a delayed copy (SendMessage with
 * DelaySeconds and a RedeliveryStamp) and deleting the original. This worker retries the way
 * crashpoint's Rust reference models it (harness/workloads/payout/src/reference/failure.rs):
 * the same message becomes visible again after `retry_delay_s * 2^(attempt-1)` seconds
 * (ChangeMessageVisibility), the attempt being SQS's ApproximateReceiveCount (redeliveries
 * after crashes count too). An unrecoverable error, or `attempt > max_retries`, leaves the
 * event not-for-retry: SendFailedMessageToFailureTransportListener then parks the message and
 * the Worker rejects (deletes) it.
 *
 * An error outside the handler (the lock release after a successful handler) leaves the
 * message on the queue untouched: the visibility timeout redelivers it, and the processed
 * claim makes that a duplicate.
 */
final class SqsRetryListener implements EventSubscriberInterface
{
    public function __construct(
        private readonly ReceiveCountingSqsClient $sqs,
        private readonly LoggerInterface $logger,
        private readonly int $maxRetries = 3,
        private readonly int $retryDelaySeconds = 1,
    ) {
    }

    public function onMessageReceived(WorkerMessageReceivedEvent $event): void
    {
        $envelope = $event->getEnvelope();
        $this->logger->info('received {class} (receive {count})', [
            'class' => (new \ReflectionClass($envelope->getMessage()))->getShortName(),
            'count' => $this->attempt($envelope),
        ]);
    }

    public function onMessageFailed(WorkerMessageFailedEvent $event): void
    {
        $error = $event->getThrowable();
        if (!$error instanceof HandlerFailedException) {
            $this->logger->warning('failed after its handler ({error}): left for redelivery', ['error' => $error->getMessage()]);
            $event->setForRetry();
            $event->addStamps(new RedeliverStamp(null));

            return;
        }
        $cause = $error->getNestedExceptions()[0] ?? $error;
        $attempt = $this->attempt($event->getEnvelope());
        if ([] !== $unrecoverable = $error->getNestedExceptionOfClass(UnrecoverableExceptionInterface::class)) {
            $event->addStamps(new FailureReasonStamp($unrecoverable[0]->getMessage()));
        } elseif ($attempt > $this->maxRetries) {
            $event->addStamps(new FailureReasonStamp("retries exhausted after $attempt attempts: ".$cause->getMessage()));
        } else {
            $delay = $this->retryDelaySeconds << min($attempt - 1, 16);
            $this->logger->warning('attempt {attempt} failed ({error}); retry {attempt}/{max} in {delay}s', [
                'attempt' => $attempt, 'max' => $this->maxRetries, 'delay' => $delay, 'error' => $cause->getMessage(),
            ]);
            $event->setForRetry();
            $event->addStamps(new RedeliverStamp($delay));

            return;
        }
        $this->logger->warning('parked in the failure transport: {reason}', ['reason' => $event->getEnvelope()->last(FailureReasonStamp::class)->reason]);
    }

    public static function getSubscribedEvents(): array
    {
        // Where Messenger's retry listener runs: before the failure transport (-100).
        return [
            WorkerMessageReceivedEvent::class => ['onMessageReceived', 0],
            WorkerMessageFailedEvent::class => ['onMessageFailed', 100],
        ];
    }

    private function attempt(Envelope $envelope): int
    {
        $received = $envelope->last(AmazonSqsReceivedStamp::class);

        return null === $received ? 1 : $this->sqs->receiveCount($received->getId());
    }
}
