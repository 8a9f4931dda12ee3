<?php

declare(strict_types=1);

namespace App\Infrastructure;

use Psr\Log\AbstractLogger;

/** One line per record on stdout, prefixed with the worker's name (`c1: …`). */
final class StdoutLogger extends AbstractLogger
{
    public function __construct(private readonly string $prefix)
    {
    }

    public function log($level, $message, array $context = []): void
    {
        $replace = [];
        foreach ($context as $key => $value) {
            if (null === $value || \is_scalar($value) || $value instanceof \Stringable) {
                $replace['{'.$key.'}'] = (string) $value;
            }
        }
        fwrite(\STDOUT, sprintf("%s: %s%s\n", $this->prefix, 'info' === $level ? '' : "[$level] ", strtr((string) $message, $replace)));
    }
}
