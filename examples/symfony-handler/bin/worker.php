<?php

/*
 * crashpoint's Symfony demo worker: the payout article's payout consumer as a Symfony Messenger 5.4 app
 * (Debian's packages), booted without a framework kernel: the bus, the AmazonSqs transport
 * built from a DSN, the handler, the middleware and the Worker of `messenger:consume`, wired
 * by hand below. All configuration comes from the environment crashpoint sets (README.md).
 *
 *   php examples/symfony-handler/bin/worker.php
 */

declare(strict_types=1);

use App\Infrastructure\Database;
use App\Infrastructure\ReceiveCountingSqsClient;
use App\Infrastructure\ServiceLocator;
use App\Infrastructure\StdoutLogger;
use App\Message\MalformedMessage;
use App\Message\PaymentCaptured;
use App\MessageHandler\CreateMerchantPayoutHandler;
use App\MessageHandler\MalformedMessageHandler;
use App\Messenger\DeduplicateMiddleware;
use App\Messenger\FailedMessageTable;
use App\Messenger\PaymentCapturedSerializer;
use App\Messenger\RedeliveringReceiver;
use App\Messenger\SqsRetryListener;
use AsyncAws\Core\HttpClient\AwsRetryStrategy;
use Symfony\Component\EventDispatcher\EventDispatcher;
use Symfony\Component\HttpClient\HttpClient;
use Symfony\Component\HttpClient\RetryableHttpClient;
use Symfony\Component\Messenger\Bridge\AmazonSqs\Transport\AmazonSqsTransport;
use Symfony\Component\Messenger\Bridge\AmazonSqs\Transport\Connection;
use Symfony\Component\Messenger\EventListener\DispatchPcntlSignalListener;
use Symfony\Component\Messenger\EventListener\SendFailedMessageToFailureTransportListener;
use Symfony\Component\Messenger\EventListener\StopWorkerOnSigtermSignalListener;
use Symfony\Component\Messenger\Handler\HandlersLocator;
use Symfony\Component\Messenger\MessageBus;
use Symfony\Component\Messenger\Middleware\HandleMessageMiddleware;
use Symfony\Component\Messenger\Middleware\SendMessageMiddleware;
use Symfony\Component\Messenger\Transport\Sender\SendersLocator;
use Symfony\Component\Messenger\Worker;

// Debian's autoloaders (php-symfony-*, php-async-aws-*), then this app's classes (PSR-4).
require_once '/usr/share/php/Symfony/Component/Messenger/autoload.php';
require_once '/usr/share/php/Symfony/Component/Messenger/Bridge/AmazonSqs/autoload.php';
require_once '/usr/share/php/Symfony/Component/EventDispatcher/autoload.php';
require_once '/usr/share/php/Symfony/Component/HttpClient/autoload.php';
spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'App\\')) {
        $file = dirname(__DIR__).'/src/'.str_replace('\\', '/', substr($class, 4)).'.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

const CONSUMER = 'create-merchant-payout-v1';
const TRANSPORT = 'async';  // the payout article's transport name

$worker = getenv('CRASHPOINT_WORKER') ?: 'symfony-worker';
$env = static function (string $name) use ($worker): string {
    $value = getenv($name);
    if (false === $value || '' === $value) {
        fwrite(STDERR, "$worker: environment variable $name is not set\n");
        exit(2);
    }

    return $value;
};
$system = getenv('CRASHPOINT_SYSTEM') ?: 'reference';
if ('reference' !== $system) {
    fwrite(STDERR, "$worker: CRASHPOINT_SYSTEM $system: this worker has only the variant `reference`\n");
    exit(2);
}
// The scenario's [config]; defaults of the Rust SystemConfig (harness/workloads/payout/src/system.rs).
$config = json_decode(getenv('CRASHPOINT_CONFIG') ?: '{}', true, 16, JSON_THROW_ON_ERROR);
$maxRetries = (int) ($config['max_retries'] ?? 3);
$retryDelay = (int) ($config['retry_delay_s'] ?? 1);
$lockTtl = (int) ($config['lock_ttl_s'] ?? 900);

// The transport DSN, pointing at crashpoint's SQS proxy (the host and port of the queue URL).
$queueUrl = parse_url($env('CRASHPOINT_QUEUE_URL'));
$dsn = sprintf(
    'sqs://%s:%d/%s?sslmode=disable&access_key=%s&secret_key=%s&region=%s&auto_setup=false&wait_time=20&buffer_size=9',
    $queueUrl['host'], $queueUrl['port'] ?? 80, basename($queueUrl['path'] ?? ''),
    rawurlencode(getenv('AWS_ACCESS_KEY_ID') ?: 'test'), rawurlencode(getenv('AWS_SECRET_ACCESS_KEY') ?: 'test'),
    getenv('AWS_DEFAULT_REGION') ?: 'us-east-1',
);

$logger = new StdoutLogger($worker);
pcntl_async_signals(true);  // SIGTERM stops the worker even while a call is held

$db = new Database($env('DATABASE_URL'));
$db->connect();

$redisUrl = parse_url($env('REDIS_URL'));
$redis = new Redis();
// Long read timeout: crashpoint holds a command while other workers move. phpredis sends
// nothing on connect (no HELLO, no CLIENT SETINFO); SELECT passes crashpoint's proxy ungated.
$redis->connect($redisUrl['host'], $redisUrl['port'] ?? 6379, 5.0, null, 0, 3600.0);
if (isset($redisUrl['pass'])) {
    $redis->auth(isset($redisUrl['user']) ? [rawurldecode($redisUrl['user']), rawurldecode($redisUrl['pass'])] : rawurldecode($redisUrl['pass']));
}
if (0 !== $database = (int) ltrim($redisUrl['path'] ?? '/0', '/')) {
    $redis->select($database);
}

// async-aws's HTTP client: the one it makes by default (RetryableHttpClient, AwsRetryStrategy:
// 3 retries of 5xx, throttling and transport errors), with a one-hour idle timeout instead of
// default_socket_timeout (60 s): crashpoint may hold a call for long.
$http = new RetryableHttpClient(HttpClient::create(['timeout' => 3600]), new AwsRetryStrategy(), 3);

$serializer = new PaymentCapturedSerializer($lockTtl);
$failureTransport = new FailedMessageTable($db, $serializer, CONSUMER);
$dedup = new DeduplicateMiddleware($redis, $logger);

/**
 * The SQS transport from the DSN (as AmazonSqsTransportFactory builds it, but with $http), its
 * SqsClient replaced by one that asks for ApproximateReceiveCount (Connection has no setter).
 *
 * @return array{AmazonSqsTransport, RedeliveringReceiver, Connection, ReceiveCountingSqsClient}
 */
$buildTransport = static function () use ($dsn, $http, $serializer): array {
    $connection = Connection::fromDsn($dsn, [], $http);
    $sqs = (function () use ($http): ReceiveCountingSqsClient {
        return $this->client = new ReceiveCountingSqsClient($this->client->getConfiguration(), null, $http);
    })->call($connection);
    $transport = new AmazonSqsTransport($connection, $serializer);

    return [$transport, new RedeliveringReceiver($transport, $sqs), $connection, $sqs];
};

// A process supervisor restarts `messenger:consume` when an exception ends it (a failed
// ReceiveMessage or DeleteMessage: Messenger 5.4's SQS connection then keeps failing with the
// same error). crashpoint fails a run whose worker exits by itself, so this loop starts a new
// Worker, with a new transport, in the same process.
$retired = [];
while (true) {
    [$sqsTransport, $receiver, $connection, $sqs] = $buildTransport();
    $senders = new ServiceLocator([TRANSPORT => static fn () => $sqsTransport]);
    $bus = new MessageBus([
        $dedup,
        new SendMessageMiddleware(new SendersLocator([PaymentCaptured::class => [TRANSPORT]], $senders)),
        new HandleMessageMiddleware(new HandlersLocator([
            PaymentCaptured::class => [new CreateMerchantPayoutHandler($db, $logger)],
            MalformedMessage::class => [new MalformedMessageHandler()],
        ])),
    ]);
    $events = new EventDispatcher();
    $events->addSubscriber(new StopWorkerOnSigtermSignalListener($logger));
    $events->addSubscriber(new DispatchPcntlSignalListener());
    $events->addSubscriber(new SqsRetryListener($sqs, $logger, $maxRetries, $retryDelay));
    $events->addSubscriber(new SendFailedMessageToFailureTransportListener(
        new ServiceLocator([TRANSPORT => static fn () => $failureTransport]),
        $logger,
    ));
    $events->addSubscriber($dedup);

    $logger->info('{system} consumer on {dsn}', ['system' => $system, 'dsn' => $dsn]);
    try {
        // One handling thread; `sleep` (µs) between empty receives: crashpoint answers a long
        // poll on an empty queue at once, so the worker polls again after 1 ms.
        (new Worker([TRANSPORT => $receiver], $bus, $events, $logger))->run(['sleep' => 1000]);
        break;  // stopped by SIGTERM
    } catch (Throwable $e) {
        $logger->error('worker stopped by {class}: {message}; starting a new one', ['class' => $e::class, 'message' => $e->getMessage()]);
        $db->rollBackIfInTransaction();
        // Its SQS connection would replay the failed receive in its destructor: keep it.
        $retired[] = $connection;
    }
}
