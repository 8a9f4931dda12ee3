<?php

declare(strict_types=1);

namespace App\Messenger;

use App\Message\MalformedMessage;
use App\Message\PaymentCaptured;
use Symfony\Component\Messenger\Envelope;
use Symfony\Component\Messenger\Exception\InvalidArgumentException;
use Symfony\Component\Messenger\Transport\Serialization\SerializerInterface;

/**
 * PaymentCaptured as plain JSON on the queue (the producer is not a Messenger app, so there is
 * no Messenger envelope and no type header): `{"event_id", "payment_id", "merchant_id",
 * "amount_minor", "currency", "lock_token"}`, as crashpoint's Rust producer writes it.
 *
 * decode() adds the DeduplicateStamp the producer's dispatch carried (key
 * `payment-captured.<event_id>` and the lock's token), as Symfony 7.3 would have carried it in
 * the envelope's headers; encode() writes the token back, so that a message parked in the
 * failure transport and replayed still releases only its own lock. A body that is not a valid PaymentCaptured decodes to a MalformedMessage (parked by
 * its handler) instead of throwing: Messenger's receiver would delete it without a trace.
 */
final class PaymentCapturedSerializer implements SerializerInterface
{
    private const UUID = '/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i';

    public function __construct(private readonly int $lockTtl = 900)
    {
    }

    public function decode(array $encodedEnvelope): Envelope
    {
        $body = (string) ($encodedEnvelope['body'] ?? '');
        try {
            $message = self::parse($body);
        } catch (\JsonException|\UnexpectedValueException $e) {
            return new Envelope(new MalformedMessage($body, $e->getMessage()));
        }

        $token = json_decode($body, true)['lock_token'] ?? null;

        return new Envelope($message, [new DeduplicateStamp('payment-captured.'.$message->eventId, $this->lockTtl, \is_string($token) ? $token : null)]);
    }

    public function encode(Envelope $envelope): array
    {
        $message = $envelope->getMessage();
        $body = match (true) {
            $message instanceof PaymentCaptured => json_encode([
                'event_id' => $message->eventId,
                'payment_id' => $message->paymentId,
                'merchant_id' => $message->merchantId,
                'amount_minor' => $message->amountInMinorUnits,
                'currency' => $message->currency,
            ] + array_filter(['lock_token' => $envelope->last(DeduplicateStamp::class)?->token]), \JSON_THROW_ON_ERROR),
            $message instanceof MalformedMessage => $message->body,
            default => throw new InvalidArgumentException(sprintf('%s cannot encode %s', self::class, get_debug_type($message))),
        };

        return ['body' => $body, 'headers' => []];
    }

    private static function parse(string $body): PaymentCaptured
    {
        $d = json_decode($body, true, 16, \JSON_THROW_ON_ERROR);
        if (!\is_array($d)) {
            throw new \UnexpectedValueException('not a JSON object');
        }
        foreach (['event_id', 'payment_id', 'merchant_id'] as $key) {
            if (!\is_string($d[$key] ?? null) || !preg_match(self::UUID, $d[$key])) {
                throw new \UnexpectedValueException("$key must be a UUID");
            }
        }
        if (!\is_int($d['amount_minor'] ?? null) || !\is_string($d['currency'] ?? null)) {
            throw new \UnexpectedValueException('amount_minor must be an integer and currency a string');
        }

        return new PaymentCaptured(
            strtolower($d['event_id']),
            strtolower($d['payment_id']),
            strtolower($d['merchant_id']),
            $d['amount_minor'],
            $d['currency'],
        );
    }
}
