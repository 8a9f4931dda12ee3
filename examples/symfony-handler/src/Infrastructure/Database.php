<?php

declare(strict_types=1);

namespace App\Infrastructure;

/**
 * The handler's PostgreSQL connection: php-pgsql (libpq) behind the small part of Doctrine
 * DBAL's Connection API that the payout article's handler uses (transactional, fetchOne,
 * executeStatement), so that the handler reads like the article's.
 *
 * On the wire: BEGIN, COMMIT and ROLLBACK are simple queries; each parameterised statement is
 * one Parse/Bind/Describe/Execute/Sync batch (PQsendQueryParams, unnamed statement), i.e. one
 * call for crashpoint's PostgreSQL proxy. (DBAL 3 over pdo_pgsql would prepare each statement
 * in a round trip of its own, unless emulated prepares are on.)
 */
final class Database
{
    /** @var \PgSql\Connection|null */
    private $connection = null;

    public function __construct(private readonly string $url)
    {
    }

    /** Connects now (a wrong DATABASE_URL fails at start, not at the first message). */
    public function connect(): void
    {
        $this->connection();
    }

    /**
     * Runs $fn in a transaction: BEGIN, $fn, COMMIT. When $fn or COMMIT throws, rolls back
     * ({@see rollBackIfInTransaction()}) and rethrows.
     *
     * @template T
     * @param callable(self): T $fn
     * @return T
     */
    public function transactional(callable $fn): mixed
    {
        if (null !== $this->connection && \PGSQL_TRANSACTION_IDLE !== pg_transaction_status($this->connection)) {
            $this->discard();  // something left a transaction open: never continue it
        }
        $this->run('BEGIN', null);
        try {
            $result = $fn($this);
            $this->run('COMMIT', null);

            return $result;
        } catch (\Throwable $e) {
            $this->rollBackIfInTransaction();
            throw $e;
        }
    }

    /** The first column of the first row, or false when there is no row (as DBAL). */
    public function fetchOne(string $sql, array $params = []): mixed
    {
        $result = $this->run($sql, $params);
        if (0 === pg_num_rows($result)) {
            return false;
        }

        return pg_fetch_result($result, 0, 0);
    }

    /** The number of affected rows (as DBAL). */
    public function executeStatement(string $sql, array $params = []): int
    {
        return pg_affected_rows($this->run($sql, $params));
    }

    /**
     * Sends ROLLBACK while libpq reports a transaction (after a failed COMMIT the server has
     * already ended it). When the ROLLBACK fails the connection is closed, as connection pools
     * discard one: the server rolls back when it closes, and the next call connects again.
     * Continuing on it would run the next message's statements inside the old transaction
     * (BEGIN only warns), and its COMMIT would commit the failed attempt's claim.
     */
    public function rollBackIfInTransaction(): void
    {
        if (null === $this->connection || \PGSQL_CONNECTION_OK !== pg_connection_status($this->connection)) {
            return;
        }
        if (\PGSQL_TRANSACTION_IDLE !== pg_transaction_status($this->connection)) {
            try {
                $this->run('ROLLBACK', null);
            } catch (DatabaseException) {
                $this->discard();
            }
        }
    }

    private function discard(): void
    {
        if (null !== $this->connection) {
            pg_close($this->connection);
            $this->connection = null;
        }
    }

    /** @return \PgSql\Connection */
    private function connection()
    {
        if (null === $this->connection || \PGSQL_CONNECTION_OK !== pg_connection_status($this->connection)) {
            $this->connection = null;
            $connection = @pg_connect($this->url, \PGSQL_CONNECT_FORCE_NEW);
            if (false === $connection) {
                throw new DatabaseException(null, 'cannot connect: '.(error_get_last()['message'] ?? 'pg_connect failed'));
            }
            $this->connection = $connection;
        }

        return $this->connection;
    }

    /**
     * Sends one call: a simple query when $params is null, else one extended-protocol batch.
     *
     * @return \PgSql\Result
     */
    private function run(string $sql, ?array $params)
    {
        $connection = $this->connection();
        $sent = null === $params
            ? @pg_send_query($connection, $sql)
            : @pg_send_query_params($connection, $sql, array_map(self::param(...), $params));
        if (false === $sent) {
            throw new DatabaseException(null, pg_last_error($connection) ?: 'the connection is lost');
        }
        $last = null;
        $error = null;
        while (false !== ($result = pg_get_result($connection))) {
            if (\PGSQL_FATAL_ERROR === pg_result_status($result) && null === $error) {
                $error = new DatabaseException(
                    pg_result_error_field($result, \PGSQL_DIAG_SQLSTATE) ?: null,
                    pg_result_error_field($result, \PGSQL_DIAG_MESSAGE_PRIMARY) ?: pg_result_error($result),
                );
            }
            $last = $result;
        }
        if (null !== $error) {
            throw $error;
        }
        if (null === $last) {
            throw new DatabaseException(null, pg_last_error($connection) ?: 'no result (the connection is lost)');
        }

        return $last;
    }

    private static function param(mixed $value): ?string
    {
        return match (true) {
            null === $value => null,
            \is_bool($value) => $value ? 't' : 'f',
            default => (string) $value,
        };
    }
}
