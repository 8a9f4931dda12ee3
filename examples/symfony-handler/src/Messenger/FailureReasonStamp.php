<?php

declare(strict_types=1);

namespace App\Messenger;

use Symfony\Component\Messenger\Stamp\NonSendableStampInterface;

/** Why a message goes to the failure transport: the `reason` of its failed_message row. */
final class FailureReasonStamp implements NonSendableStampInterface
{
    public function __construct(public readonly string $reason)
    {
    }
}
