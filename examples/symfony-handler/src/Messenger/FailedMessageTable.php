<?php

declare(strict_types=1);

namespace App\Messenger;

use App\Infrastructure\Database;
use Symfony\Component\Messenger\Envelope;
use Symfony\Component\Messenger\Transport\Sender\SenderInterface;
use Symfony\Component\Messenger\Transport\Serialization\SerializerInterface;

/**
 * The failure transport: one `failed_message` row per parked message, written outside any
 * transaction (the payout article uses `doctrine://default?queue_name=failed`; crashpoint's schema has
 * this table, and its "nothing lost" invariant accepts an event that is paid or parked here).
 * Same statement as the Rust reference's park().
 */
final class FailedMessageTable implements SenderInterface
{
    private const NIL_UUID = '00000000-0000-0000-0000-000000000000';

    public function __construct(
        private readonly Database $connection,
        private readonly SerializerInterface $serializer,
        private readonly string $consumer,
    ) {
    }

    public function send(Envelope $envelope): Envelope
    {
        $raw = $this->serializer->encode($envelope)['body'];
        try {
            $body = json_decode($raw, false, 512, \JSON_THROW_ON_ERROR);
        } catch (\JsonException) {
            $body = $raw;
        }
        $id = \is_object($body) ? ($body->event_id ?? $body->outbox_id ?? null) : null;
        if (!\is_string($id) || !preg_match('/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i', $id)) {
            $id = self::NIL_UUID;
        }
        $this->connection->executeStatement(
            <<<'SQL'
                /* crashpoint:park */
                INSERT INTO failed_message (consumer_name, message_id, body, reason, failed_at)
                VALUES ($1, $2, CAST($3 AS JSONB), $4, crashpoint_now())
                SQL,
            [
                $this->consumer,
                $id,
                json_encode($body, \JSON_THROW_ON_ERROR),
                $envelope->last(FailureReasonStamp::class)?->reason ?? 'failed',
            ],
        );

        return $envelope;
    }
}
