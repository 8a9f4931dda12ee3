<?php

declare(strict_types=1);

namespace App\Infrastructure;

use Symfony\Contracts\Service\ServiceLocatorTrait;
use Symfony\Contracts\Service\ServiceProviderInterface;

/** A PSR-11 locator over factories, for the listeners that take one (no DI container here). */
final class ServiceLocator implements ServiceProviderInterface
{
    use ServiceLocatorTrait;
}
