<?php

declare(strict_types=1);

namespace App\Infrastructure;

/** A PostgreSQL error: its SQLSTATE (null when the connection failed) and primary message. */
final class DatabaseException extends \RuntimeException
{
    public function __construct(public readonly ?string $sqlState, string $message)
    {
        parent::__construct(null === $sqlState ? "postgres: $message" : "postgres $sqlState: $message");
    }
}
