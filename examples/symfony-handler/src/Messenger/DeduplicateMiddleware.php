<?php

declare(strict_types=1);

namespace App\Messenger;

use Psr\Log\LoggerInterface;
use Symfony\Component\EventDispatcher\EventSubscriberInterface;
use Symfony\Component\Messenger\Envelope;
use Symfony\Component\Messenger\Event\WorkerMessageFailedEvent;
use Symfony\Component\Messenger\Middleware\MiddlewareInterface;
use Symfony\Component\Messenger\Middleware\StackInterface;
use Symfony\Component\Messenger\Stamp\ReceivedStamp;

/**
 * The smallest stand-in for Symfony 7.3's DeduplicateMiddleware (Messenger 5.4 has none),
 * with the lock lifecycle the payout article describes, on a plain Redis key:
 *
 * - dispatch (no ReceivedStamp): `SET key 1 NX PX ttl`; when the key exists the message is
 *   dropped (not sent);
 * - consumption: after the handler succeeded, release the lock; when it failed the lock is
 *   kept for Messenger's retries, and released when the message is abandoned, i.e. the failed
 *   event says it will not be retried (it went to the failure transport).
 *
 * The release is a compare-and-delete of the token the message carries (an EVAL, as Symfony's
 * RedisStore releases), so a lock that expired and was taken by a later dispatch stays with
 * it; a plain `DEL` only for a message without a token. crashpoint names `SET … NX` `lock`
 * and both releases `unlock`, as its in-process producer and consumer do.
 */
final class DeduplicateMiddleware implements MiddlewareInterface, EventSubscriberInterface
{
    public function __construct(
        private readonly \Redis $redis,
        private readonly LoggerInterface $logger,
    ) {
    }

    public function handle(Envelope $envelope, StackInterface $stack): Envelope
    {
        $stamp = $envelope->last(DeduplicateStamp::class);
        if (null === $stamp) {
            return $stack->next()->handle($envelope, $stack);
        }

        if (null === $envelope->last(ReceivedStamp::class)) {
            $acquired = $this->redis->set($stamp->key, '1', ['nx', 'px' => $stamp->ttl * 1000]);
            if (true !== $acquired) {
                $this->logger->info('{key} is locked: message not dispatched', ['key' => $stamp->key]);

                return $envelope;
            }

            return $stack->next()->handle($envelope, $stack);
        }

        // Throws when the handler failed: the lock stays for the retries.
        $envelope = $stack->next()->handle($envelope, $stack);
        $this->release($stamp);

        return $envelope;
    }

    public function onMessageFailed(WorkerMessageFailedEvent $event): void
    {
        $stamp = $event->getEnvelope()->last(DeduplicateStamp::class);
        if (null !== $stamp && !$event->willRetry()) {
            $this->release($stamp);
        }
    }

    public static function getSubscribedEvents(): array
    {
        // After SendFailedMessageToFailureTransportListener (-100): park, then release.
        return [WorkerMessageFailedEvent::class => ['onMessageFailed', -200]];
    }

    /** Deletes KEYS[1] only while it holds ARGV[1] (Redis documentation, "Distributed locks"). */
    private const COMPARE_AND_DELETE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

    private function release(DeduplicateStamp $stamp): void
    {
        $released = null === $stamp->token
            ? $this->redis->del($stamp->key)
            : $this->redis->eval(self::COMPARE_AND_DELETE, [$stamp->key, $stamp->token], 1);
        if (false === $released) {
            $error = $this->redis->getLastError() ?? 'no reply';
            $this->redis->clearLastError();
            throw new \RuntimeException(sprintf('Redis release of %s failed: %s', $stamp->key, $error));
        }
    }
}
