<?php

declare(strict_types=1);

namespace App\MessageHandler;

use App\Infrastructure\Database;
use App\Message\PaymentCaptured;
use Psr\Log\LoggerInterface;
use Symfony\Component\Messenger\Attribute\AsMessageHandler;
use Symfony\Component\Messenger\Exception\UnrecoverableMessageHandlingException;

/**
 * The payout article's CreateMerchantPayoutHandler: one transaction that claims the event in
 * processed_message, creates the payout (the UNIQUE (source_payment_id) constraint decides
 * under concurrency) and writes the MerchantPayoutCreated outbox row.
 *
 * Differences from the article, all for crashpoint: each statement starts with a
 * `crashpoint:NAME` comment that names its call in the trace, and the timestamps the Rust
 * reference takes from the harness's logical clock (processed_at, next_attempt_at) come from
 * crashpoint_now(), a function in the schedule's schema; the article relies on DEFAULT now().
 */
#[AsMessageHandler]
final class CreateMerchantPayoutHandler
{
    private const CONSUMER = 'create-merchant-payout-v1';

    public function __construct(
        private readonly Database $connection,
        private readonly LoggerInterface $logger,
    ) {
    }

    public function __invoke(PaymentCaptured $message): void
    {
        $this->connection->transactional(function (Database $connection) use ($message): void {
            $claimedMessageId = $connection->fetchOne(
                <<<'SQL'
                    /* crashpoint:claim */
                    INSERT INTO processed_message (consumer_name, message_id, processed_at)
                    VALUES ($1, $2, crashpoint_now())
                    ON CONFLICT (consumer_name, message_id) DO NOTHING
                    RETURNING message_id
                    SQL,
                [self::CONSUMER, $message->eventId],
            );

            if (false === $claimedMessageId) {
                // GOOD: this logical event already committed successfully.
                $this->logger->info('{event} already processed: duplicate, no effect', ['event' => $message->eventId]);

                return;
            }

            $payoutId = $connection->fetchOne(
                <<<'SQL'
                    /* crashpoint:insert_payout */
                    INSERT INTO merchant_payout (id, source_payment_id, merchant_id, amount_minor, currency)
                    VALUES (gen_random_uuid(), $1, $2, $3, $4)
                    ON CONFLICT (source_payment_id) DO NOTHING
                    RETURNING id
                    SQL,
                [$message->paymentId, $message->merchantId, $message->amountInMinorUnits, $message->currency],
            );

            if (false === $payoutId) {
                // A different event already paid this payment. Retrying cannot fix it.
                throw new UnrecoverableMessageHandlingException(sprintf('Payment %s already has a merchant payout', $message->paymentId));
            }

            $connection->fetchOne(
                <<<'SQL'
                    /* crashpoint:insert_outbox */
                    INSERT INTO outbox_event (id, causation_id, event_type, aggregate_id, payload, next_attempt_at)
                    VALUES (gen_random_uuid(), $1, 'MerchantPayoutCreated', $2, CAST($3 AS JSONB), crashpoint_now())
                    RETURNING id
                    SQL,
                [
                    $message->eventId,
                    $message->paymentId,
                    json_encode([
                        'payoutId' => $payoutId,
                        'paymentId' => $message->paymentId,
                        'merchantId' => $message->merchantId,
                        'amount' => $message->amountInMinorUnits,
                        'currency' => $message->currency,
                    ], \JSON_THROW_ON_ERROR),
                ],
            );
            $this->logger->info('{event}: payout {payout} created', ['event' => $message->eventId, 'payout' => $payoutId]);
        });
    }
}
