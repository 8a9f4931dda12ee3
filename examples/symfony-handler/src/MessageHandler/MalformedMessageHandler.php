<?php

declare(strict_types=1);

namespace App\MessageHandler;

use App\Message\MalformedMessage;
use Symfony\Component\Messenger\Attribute\AsMessageHandler;
use Symfony\Component\Messenger\Exception\UnrecoverableMessageHandlingException;

#[AsMessageHandler]
final class MalformedMessageHandler
{
    public function __invoke(MalformedMessage $message): void
    {
        throw new UnrecoverableMessageHandlingException('malformed PaymentCaptured: '.$message->error);
    }
}
