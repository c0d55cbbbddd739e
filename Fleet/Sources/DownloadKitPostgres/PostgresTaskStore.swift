@_spi(DownloadKitInternal) import DownloadKit
@_spi(DownloadKitInternal) import DownloadKitManager
import Foundation
import HTTPClient
import HTTPWire
import Logging
import PostgresNIO

/// The task queue in PostgreSQL, shared by a fleet of workers on several hosts (docs/FLEET.md).
///
/// One row per task in `downloadkit_task` (the columns of the SQLite store plus the lease: owner,
/// epoch, deadline), the history of every lease in `downloadkit_lease`, the workers in
/// `downloadkit_worker` and fleet settings in `downloadkit_setting`. ``open(_:logger:)`` applies the
/// schema migrations (recorded in `downloadkit_migration`, one at a time under an advisory lock, so
/// several workers starting together migrate once).
///
/// It is a ``TaskStoring`` (a single ``DownloadManager`` may keep its tasks here), and the store of
/// ``FleetWorker``s: they claim waiting tasks with leases (``claim(worker:count:lease:)``), renew them by
/// heartbeat (``renew(worker:leases:lease:)``) and finish them fenced by the lease's epoch. Every change of
/// a task's state or owner is announced on the `downloadkit_task` channel (LISTEN/NOTIFY, see
/// ``taskEvents()``).
public final class PostgresTaskStore: TaskStoring {
    /// The server and database.
    public let url: PostgresStoreURL
    /// The server and database, without the password.
    public var location: String { url.description }

    private let client: PostgresClient
    private let runner: Task<Void, Never>
    private let logger: Logger
    /// Background writes (``saveInBackground(_:deleting:failed:)``) in the order they were handed over.
    private let writes: AsyncStream<@Sendable () async -> Void>.Continuation
    private let writer: Task<Void, Never>

    private init(url: PostgresStoreURL, logger: Logger) {
        self.url = url
        self.logger = logger
        var configuration = url.clientConfiguration
        configuration.options.maximumConnections = 4
        configuration.options.connectTimeout = .seconds(10)
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        self.client = client
        runner = Task { await client.run() }
        let (stream, continuation) = AsyncStream<@Sendable () async -> Void>.makeStream()
        writes = continuation
        writer = Task {
            for await write in stream { await write() }
        }
    }

    /// Connects to `url`, checks the server answers and migrates the schema to the newest version.
    /// - Throws: ``DownloadManagerError`` (`storage`) naming the server when it cannot be reached or migrated.
    public static func open(_ url: PostgresStoreURL, logger: Logger = Logger(label: "downloadkit.postgres")) async throws
        -> PostgresTaskStore
    {
        // postgres-nio's background logger warns when the first query races `run()` starting; it waits.
        var quiet = logger
        if quiet.logLevel < .error { quiet.logLevel = .error }
        // Migrate over a connection of its own first: a server that is not there fails at once (the pool
        // would keep retrying), and the pool starts only for a reachable, migrated database.
        do {
            try await migrate(url, logger: quiet)
        } catch {
            throw DownloadManagerError(.storage, "cannot open the queue at \(url): \(String(reflecting: error))")
        }
        return PostgresTaskStore(url: url, logger: quiet)
    }

    /// Ends the background writes (after those handed over) and the connections.
    public func close() async {
        writes.finish()
        await writer.value
        runner.cancel()
        await runner.value
    }

    // MARK: - Migrations

    /// The migrations, oldest first; each runs once, in one transaction.
    static let migrations: [(name: String, statements: [String])] = [
        (
            "v1: tasks, leases, workers",
            [
                """
                CREATE TABLE downloadkit_task (
                    id text PRIMARY KEY,
                    original_url text NOT NULL,
                    current_url text NOT NULL,
                    file_id text,
                    destination_kind text NOT NULL,
                    destination_path text NOT NULL,
                    naming_rule text,
                    naming_file_id text,
                    final_path text,
                    state text NOT NULL,
                    bytes_received bigint NOT NULL DEFAULT 0,
                    total_bytes bigint,
                    priority bigint NOT NULL DEFAULT 0,
                    queue_order bigint NOT NULL,
                    group_name text,
                    checksum text,
                    headers text NOT NULL DEFAULT '{}',
                    metadata text NOT NULL DEFAULT '{}',
                    requires_unmetered_network boolean NOT NULL DEFAULT false,
                    rate_limit bigint,
                    error_code text,
                    error_message text,
                    created_at double precision NOT NULL,
                    updated_at double precision NOT NULL,
                    finished_at double precision,
                    lease_owner text,
                    lease_epoch bigint NOT NULL DEFAULT 0,
                    lease_until timestamptz
                )
                """,
                "CREATE UNIQUE INDEX downloadkit_task_original_url ON downloadkit_task (original_url)",
                "CREATE UNIQUE INDEX downloadkit_task_file_id ON downloadkit_task (file_id) WHERE file_id IS NOT NULL",
                "CREATE INDEX downloadkit_task_group ON downloadkit_task (group_name)",
                """
                CREATE INDEX downloadkit_task_line ON downloadkit_task (priority DESC, queue_order, id)
                    WHERE state IN ('waiting', 'running')
                """,
                "CREATE SEQUENCE downloadkit_queue_order",
                """
                CREATE TABLE downloadkit_lease (
                    task_id text NOT NULL,
                    epoch bigint NOT NULL,
                    worker text NOT NULL,
                    acquired_at timestamptz NOT NULL,
                    valid_until timestamptz NOT NULL,
                    ended_at timestamptz,
                    outcome text,
                    PRIMARY KEY (task_id, epoch)
                )
                """,
                """
                CREATE TABLE downloadkit_worker (
                    id text PRIMARY KEY,
                    host text NOT NULL,
                    pid bigint NOT NULL,
                    max_concurrent bigint NOT NULL,
                    started_at timestamptz NOT NULL,
                    seen_at timestamptz NOT NULL
                )
                """,
                "CREATE TABLE downloadkit_setting (name text PRIMARY KEY, value bigint)",
                """
                CREATE FUNCTION downloadkit_task_notify() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF TG_OP = 'DELETE' THEN
                        PERFORM pg_notify('downloadkit_task', json_build_object(
                            'id', OLD.id, 'state', 'removed', 'epoch', OLD.lease_epoch, 'worker', OLD.lease_owner)::text);
                        RETURN OLD;
                    END IF;
                    PERFORM pg_notify('downloadkit_task', json_build_object(
                        'id', NEW.id, 'state', NEW.state, 'epoch', NEW.lease_epoch, 'worker', NEW.lease_owner)::text);
                    RETURN NEW;
                END
                $$
                """,
                """
                CREATE TRIGGER downloadkit_task_added_or_removed AFTER INSERT OR DELETE ON downloadkit_task
                    FOR EACH ROW EXECUTE FUNCTION downloadkit_task_notify()
                """,
                """
                CREATE TRIGGER downloadkit_task_changed AFTER UPDATE ON downloadkit_task FOR EACH ROW
                    WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.lease_epoch IS DISTINCT FROM NEW.lease_epoch)
                    EXECUTE FUNCTION downloadkit_task_notify()
                """,
            ]
        ),
        (
            // The error's typed fields (ManagedTaskError) and the task's connection count, which v1 rows kept
            // only as `error_code` + `error_message` and a metadata key: all nullable, so v1 rows read as before.
            "v2: typed errors, connections",
            [
                """
                ALTER TABLE downloadkit_task ADD COLUMN error_category text, ADD COLUMN error_http_status bigint,
                    ADD COLUMN error_transient boolean, ADD COLUMN error_cause text, ADD COLUMN connections bigint
                """
            ]
        ),
        (
            // The task's mirrors (a JSON array of strings, NULL for none) and its connections per source, as the
            // SQLite store's v3 and v4 keep them; nullable, so older rows read as before.
            "v3: mirrors, connections per source",
            ["ALTER TABLE downloadkit_task ADD COLUMN mirrors text, ADD COLUMN connections_per_source bigint"]
        ),
        (
            // The task's piece table (ManagedTask.pieceChecksums; StoredPieceTable's columns), as the SQLite
            // store's v5 keeps it: a row of its own, written once when the task is first written (the task's row
            // is rewritten at every progress flush, and a table can be hundreds of kilobytes), read with the
            // task, deleted with it.
            "v4: piece tables",
            [
                """
                CREATE TABLE downloadkit_task_pieces (
                    task_id text PRIMARY KEY REFERENCES downloadkit_task (id) ON DELETE CASCADE,
                    algorithm text NOT NULL, piece_length bigint NOT NULL, digests bytea NOT NULL
                )
                """
            ]
        ),
    ]

    /// The names of the migrations this version applies, oldest first.
    public static var migrationNames: [String] { migrations.map(\.name) }

    private static func migrate(_ url: PostgresStoreURL, logger: Logger) async throws {
        let connection = try await PostgresConnection.connect(
            configuration: try url.connectionConfiguration(), id: 0, logger: logger)
        do {
            try await migrate(on: connection, logger: logger)
            try await connection.close()
        } catch {
            try? await connection.close()
            throw error
        }
    }

    private static func migrate(on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.withTransaction(logger: logger) { connection in
            // One migrator at a time across the fleet (released at commit).
            try await connection.query("SELECT pg_advisory_xact_lock(7190019)", logger: logger).drain()
            try await connection.query(
                "CREATE TABLE IF NOT EXISTS downloadkit_migration (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
                logger: logger
            ).drain()
            var applied: Set<String> = []
            for try await name in try await connection.query("SELECT name FROM downloadkit_migration", logger: logger)
                .decode(String.self)
            {
                applied.insert(name)
            }
            for migration in Self.migrations where !applied.contains(migration.name) {
                for statement in migration.statements {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger).drain()
                }
                try await connection.query(
                    "INSERT INTO downloadkit_migration (name) VALUES (\(migration.name))", logger: logger
                ).drain()
            }
        }
    }

    /// The applied migrations, oldest first (for tests and diagnostics).
    public func appliedMigrations() async throws -> [String] {
        var names: [String] = []
        let rows = try await client.query("SELECT name FROM downloadkit_migration ORDER BY applied_at, name", logger: logger)
        for try await name in rows.decode(String.self) { names.append(name) }
        return names
    }

    // MARK: - TaskStoring

    public func loadTasks() async throws -> [ManagedTask] {
        try await fleetTasks().map(\.task)
    }

    public func save(_ tasks: [ManagedTask], deleting deletions: [String]) async throws {
        guard !tasks.isEmpty || !deletions.isEmpty else { return }
        // Through the same line as the background writes: a write handed over earlier never lands later.
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let queued = writes.yield { [self] in
                do {
                    try await write(tasks, deleting: deletions)
                    continuation.resume()
                } catch {
                    continuation.resume(throwing: error)
                }
            }
            if case .terminated = queued {
                continuation.resume(throwing: DownloadManagerError(.closed, "the store at \(url) is closed"))
            }
        }
    }

    /// One transaction: upsert `tasks` (a task's piece table with its first row only), delete `deletions`.
    private func write(_ tasks: [ManagedTask], deleting deletions: [String]) async throws {
        try await client.withTransaction(logger: logger) { connection in
            for task in tasks {
                // `xmax = 0` holds for a row this statement inserted (an updated row carries this transaction's id).
                var upsert = Self.upsert(task)
                upsert.sql += " RETURNING (xmax = 0) AS inserted"
                let inserted = try await connection.query(upsert, logger: logger).collect().first?.decode(Bool.self) ?? false
                if inserted, let pieces = task.pieceChecksums {
                    try await connection.query(try Self.insertPieces(pieces, of: task.id), logger: logger).drain()
                }
            }
            if !deletions.isEmpty {
                try await connection.query("DELETE FROM downloadkit_task WHERE id = ANY(\(deletions))", logger: logger)
                    .drain()
            }
        }
    }

    public func saveInBackground(
        _ tasks: [ManagedTask], deleting deletions: [String], failed: @escaping @Sendable (any Error) -> Void
    ) {
        let queued = writes.yield { [self] in
            do {
                try await write(tasks, deleting: deletions)
            } catch {
                failed(error)
            }
        }
        // A closed store writes nothing: say so, as `save` does (the manager's awaited commits come this way).
        if case .terminated = queued { failed(DownloadManagerError(.closed, "the store at \(url) is closed")) }
    }

    public func drain() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let result = writes.yield { continuation.resume() }
            if case .terminated = result { continuation.resume() }
        }
    }

    /// The task's own columns (never the lease), each with how a task's value is bound: the one list that
    /// the writes (``upsert(_:)``, ``add(_:defaultDirectory:)``) and the reads (``taskColumns``) spell.
    static let ownColumns: [(name: String, bind: @Sendable (inout PostgresBindings, ManagedTask) -> Void)] = [
        ("id", { $0.append($1.id) }),
        ("original_url", { $0.append($1.originalURL) }),
        ("current_url", { $0.append($1.currentURL) }),
        ("file_id", { $0.append($1.fileID) }),
        ("destination_kind", { $0.append(DestinationColumns($1.destination).kind) }),
        ("destination_path", { $0.append(DestinationColumns($1.destination).path) }),
        ("naming_rule", { $0.append(DestinationColumns($1.destination).namingRule) }),
        ("naming_file_id", { $0.append(DestinationColumns($1.destination).namingFileID) }),
        ("final_path", { $0.append($1.path) }),
        ("state", { $0.append($1.state.rawValue) }),
        ("bytes_received", { $0.append($1.bytesReceived) }),
        ("total_bytes", { $0.append($1.totalBytes) }),
        ("priority", { $0.append(Int64($1.priority.rawValue)) }),
        ("queue_order", { $0.append($1.queueOrder) }),
        ("group_name", { $0.append($1.group) }),
        ("checksum", { $0.append($1.checksum?.description) }),
        ("headers", { $0.append(TaskFieldsJSON.encode($1.headers)) }),
        ("metadata", { $0.append(TaskFieldsJSON.encode($1.metadata)) }),
        ("requires_unmetered_network", { $0.append($1.requiresUnmeteredNetwork) }),
        ("rate_limit", { $0.append($1.rateLimit.map(Int64.init)) }),
        ("error_code", { $0.append($1.error?.code.name) }),
        ("error_message", { $0.append($1.error?.message) }),
        ("error_category", { $0.append($1.error?.category.rawValue) }),
        ("error_http_status", { $0.append($1.error?.httpStatus.map(Int64.init)) }),
        ("error_transient", { $0.append($1.error?.isTransient) }),
        ("error_cause", { $0.append($1.error?.cause?.storageText) }),
        ("connections", { $0.append($1.connections.map(Int64.init)) }),
        ("mirrors", { $0.append(TaskMirrorsJSON.encode($1.mirrors)) }),
        ("connections_per_source", { $0.append($1.connectionsPerSource.map(Int64.init)) }),
        ("created_at", { $0.append($1.createdAt.timeIntervalSince1970) }),
        ("updated_at", { $0.append($1.updatedAt.timeIntervalSince1970) }),
        ("finished_at", { $0.append($1.finishedAt?.timeIntervalSince1970) }),
    ]

    /// `INSERT INTO downloadkit_task (every own column) VALUES (…)` with `task`'s values bound, but SQL
    /// `expressions` in place of the named columns' values.
    static func insert(_ task: ManagedTask, expressions: [String: String] = [:]) -> (sql: String, binds: PostgresBindings) {
        var binds = PostgresBindings(capacity: ownColumns.count)
        var values: [String] = []
        for column in ownColumns {
            if let expression = expressions[column.name] {
                values.append(expression)
            } else {
                column.bind(&binds, task)
                values.append("$\(binds.count)")
            }
        }
        let names = ownColumns.map(\.name).joined(separator: ", ")
        return ("INSERT INTO downloadkit_task (\(names)) VALUES (\(values.joined(separator: ", ")))", binds)
    }

    /// Stores `table` as the piece table of task `id` (``StoredPieceTable``'s columns).
    static func insertPieces(_ table: PieceChecksums, of id: String) throws -> PostgresQuery {
        let stored = StoredPieceTable(table)
        return try """
            INSERT INTO downloadkit_task_pieces (task_id, algorithm, piece_length, digests)
            VALUES (\(id), \(stored.algorithm), \(stored.pieceLength), \(Data(stored.digests ?? [])))
            ON CONFLICT (task_id) DO NOTHING
            """
    }

    /// Inserts the task or updates its own columns (never the lease; never its `original_url` and
    /// `created_at`, which identify it).
    static func upsert(_ task: ManagedTask) -> PostgresQuery {
        let insert = insert(task)
        let kept: Set = ["id", "original_url", "created_at"]
        let updates = ownColumns.map(\.name).filter { !kept.contains($0) }.map { "\($0) = EXCLUDED.\($0)" }
        return PostgresQuery(
            unsafeSQL: insert.sql + " ON CONFLICT (id) DO UPDATE SET " + updates.joined(separator: ", "), binds: insert.binds)
    }

    // MARK: - The queue

    /// Adds tasks at the end of the waiting line (in one transaction) and returns each one's id and whether
    /// it was added: a task whose URL or file id is already queued is not added again (its id is returned).
    /// A request without a destination goes to `defaultDirectory`, named like the manager names it.
    /// - Throws: ``DownloadManagerError`` `invalidURL` (nothing is added) or the server's error.
    public func add(_ requests: [DownloadManager.TaskRequest], defaultDirectory: String) async throws
        -> [(id: String, added: Bool)]
    {
        for request in requests {
            for url in [request.url] + request.mirrors {
                do {
                    _ = try HTTPURL(url)
                } catch {
                    throw DownloadManagerError(.invalidURL, "not an http(s) URL: \(HTTPURL.redacting(url)) (\(error.detail))")
                }
            }
            do throws(DownloadError) {
                try request.pieceChecksums?.validate()
            } catch {
                throw DownloadManagerError(.invalidPieceChecksums, "\(HTTPURL.redacting(request.url)): \(error.detail)")
            }
        }
        let now = Date()
        return try await client.withTransaction(logger: logger) { connection in
            var results: [(id: String, added: Bool)] = []
            var identifiers = TaskIdentifier.Generator(expected: requests.count)
            for request in requests {
                let destination = DestinationColumns.absolute(
                    request.destination ?? .directory(defaultDirectory, naming: request.fileID.map { .fileID($0) } ?? .md5OfURL))
                var path: String?
                if case .file(let file) = destination { path = file }
                let task = ManagedTask(
                    id: identifiers.next(), originalURL: request.url, currentURL: request.url,
                    fileID: request.fileID, destination: destination, path: path, state: .waiting, bytesReceived: 0,
                    totalBytes: nil, priority: request.priority, queueOrder: 0, group: request.group,
                    checksum: request.checksum, headers: request.headers, metadata: request.metadata,
                    requiresUnmeteredNetwork: request.requiresUnmeteredNetwork, rateLimit: request.rateLimit,
                    error: nil, createdAt: now, updatedAt: now, finishedAt: nil, connections: request.connections,
                    mirrors: request.mirrors, connectionsPerSource: request.connectionsPerSource)
                let insert = Self.insert(task, expressions: ["queue_order": "nextval('downloadkit_queue_order')"])
                let inserted = try await connection.query(
                    PostgresQuery(unsafeSQL: insert.sql + " ON CONFLICT DO NOTHING RETURNING id", binds: insert.binds),
                    logger: logger
                ).collect()
                if !inserted.isEmpty {
                    if let pieces = request.pieceChecksums {
                        try await connection.query(try Self.insertPieces(pieces, of: task.id), logger: logger).drain()
                    }
                    results.append((task.id, true))
                    continue
                }
                let existing = try await connection.query(
                    """
                    SELECT id FROM downloadkit_task
                    WHERE original_url = \(request.url) OR current_url = \(request.url)
                        OR (file_id IS NOT NULL AND file_id = \(request.fileID))
                    ORDER BY created_at LIMIT 1
                    """, logger: logger
                ).collect()
                guard let row = existing.first else {
                    throw DownloadManagerError(.storage, "\(HTTPURL.redacting(request.url)) was neither added nor found")
                }
                results.append((try row.decode(String.self), false))
            }
            return results
        }
    }

    /// Pauses waiting and running tasks; returns the ids paused. A running task's worker finds its lease
    /// gone at its next heartbeat and stops writing; its lease is left to run out (not ended early), so no
    /// other worker can take the task — after ``resume(_:)`` — while the old one may still write.
    public func pause(_ ids: [String]) async throws -> [String] {
        let now = Date().timeIntervalSince1970
        return try await client.withTransaction(logger: logger) { connection in
            var paused: [String] = []
            for try await id in try await connection.query(
                """
                UPDATE downloadkit_task SET state = 'paused', updated_at = \(now)
                WHERE id = ANY(\(ids)) AND state IN ('waiting', 'running')
                RETURNING id
                """, logger: logger
            ).decode(String.self) {
                paused.append(id)
            }
            try await connection.query(
                """
                UPDATE downloadkit_lease l SET outcome = 'paused' FROM downloadkit_task t
                WHERE t.id = ANY(\(paused)) AND l.task_id = t.id AND l.epoch = t.lease_epoch AND l.ended_at IS NULL
                """, logger: logger
            ).drain()
            return paused
        }
    }

    /// Puts paused, failed and cancelled tasks at the end of the waiting line; returns the ids resumed.
    /// A task whose last lease has not run out yet waits for it before any worker claims it.
    public func resume(_ ids: [String]) async throws -> [String] {
        let now = Date().timeIntervalSince1970
        var resumed: [String] = []
        for try await id in try await client.query(
            """
            UPDATE downloadkit_task SET state = 'waiting', queue_order = nextval('downloadkit_queue_order'),
                error_code = NULL, error_message = NULL, error_category = NULL, error_http_status = NULL,
                error_transient = NULL, error_cause = NULL, finished_at = NULL, updated_at = \(now)
            WHERE id = ANY(\(ids)) AND state IN ('paused', 'failed', 'cancelled')
            RETURNING id
            """, logger: logger
        ).decode(String.self) {
            resumed.append(id)
        }
        return resumed
    }

    /// Every task with its lease, in waiting-line order (completed ones included).
    public func fleetTasks() async throws -> [FleetTask] {
        let rows = try await client.query(
            PostgresQuery(unsafeSQL: "SELECT \(Self.taskColumns), now() AS server_now FROM downloadkit_task ORDER BY queue_order, id"),
            logger: logger)
        var tasks: [FleetTask] = []
        for try await row in rows { tasks.append(try Self.fleetTask(row.makeRandomAccess())) }
        return tasks
    }

    /// One task with its lease, or nil.
    public func fleetTask(_ id: String) async throws -> FleetTask? {
        var query = PostgresQuery(
            unsafeSQL: "SELECT \(Self.taskColumns), now() AS server_now FROM downloadkit_task WHERE id = $1")
        query.binds.append(id)
        for try await row in try await client.query(query, logger: logger) {
            return try Self.fleetTask(row.makeRandomAccess())
        }
        return nil
    }

    /// How many tasks wait or run (a running task whose worker died counts until another finishes it).
    public func pendingCount() async throws -> Int {
        let rows = try await client.query(
            "SELECT count(*) FROM downloadkit_task WHERE state IN ('waiting', 'running')", logger: logger)
        for try await count in rows.decode(Int64.self) { return Int(count) }
        return 0
    }

    /// Sets the fleet-wide limit on running tasks (nil: none); claims read it, so it applies to the whole
    /// fleet from the next claim on.
    public func setFleetMaxConcurrent(_ limit: Int?) async throws {
        if let limit {
            try await client.query(
                """
                INSERT INTO downloadkit_setting (name, value) VALUES ('fleet_max_concurrent', \(Int64(limit)))
                ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value
                """, logger: logger
            ).drain()
        } else {
            try await client.query("DELETE FROM downloadkit_setting WHERE name = 'fleet_max_concurrent'", logger: logger)
                .drain()
        }
    }

    /// The fleet-wide limit, if set.
    public func fleetMaxConcurrent() async throws -> Int? {
        let rows = try await client.query(
            "SELECT value FROM downloadkit_setting WHERE name = 'fleet_max_concurrent'", logger: logger)
        for try await value in rows.decode(Int64.self) { return Int(value) }
        return nil
    }

    // MARK: - Workers and leases

    /// Records a worker (its host, process and limit), or refreshes its record.
    public func register(worker: String, maxConcurrent: Int) async throws {
        let host = ProcessInfo.processInfo.hostName
        let pid = Int64(getpid())
        try await client.query(
            """
            INSERT INTO downloadkit_worker (id, host, pid, max_concurrent, started_at, seen_at)
            VALUES (\(worker), \(host), \(pid), \(Int64(maxConcurrent)), now(), now())
            ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid,
                max_concurrent = EXCLUDED.max_concurrent, started_at = EXCLUDED.started_at, seen_at = now()
            """, logger: logger
        ).drain()
    }

    /// Claims up to `count` tasks for `worker`: the first of the waiting line across the fleet (higher
    /// priority first, then queue order), and running tasks whose lease has expired (their worker died or
    /// stalled), each with a new lease of `lease` and the next epoch. Rows another transaction holds are
    /// skipped (`FOR UPDATE SKIP LOCKED`). Claims are serialised by an advisory lock so the fleet-wide
    /// limit holds.
    public func claim(worker: String, count: Int, lease: Duration) async throws -> [Lease] {
        guard count > 0 else { return [] }
        let seconds = lease / .seconds(1)
        let now = Date().timeIntervalSince1970
        return try await client.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(7190020)", logger: logger).drain()
            var allowed = Int64(count)
            let limitRows = try await connection.query(
                """
                SELECT (SELECT value FROM downloadkit_setting WHERE name = 'fleet_max_concurrent'),
                       (SELECT count(*) FROM downloadkit_task WHERE state = 'running' AND lease_until > now())
                """, logger: logger
            ).collect()
            if let row = limitRows.first {
                let (limit, live) = try row.decode((Int64?, Int64).self)
                if let limit { allowed = min(allowed, max(0, limit - live)) }
            }
            guard allowed > 0 else { return [] }
            var query = PostgresQuery(
                unsafeSQL: """
                    WITH picked AS (
                        SELECT id FROM downloadkit_task
                        WHERE state IN ('waiting', 'running') AND (lease_until IS NULL OR lease_until <= now())
                        ORDER BY priority DESC, queue_order, id
                        LIMIT $1
                        FOR UPDATE SKIP LOCKED
                    ), claimed AS (
                        UPDATE downloadkit_task t SET state = 'running', lease_owner = $2, lease_epoch = t.lease_epoch + 1,
                            lease_until = now() + make_interval(secs => $3), error_code = NULL, error_message = NULL,
                            error_category = NULL, error_http_status = NULL, error_transient = NULL, error_cause = NULL,
                            updated_at = $4
                        FROM picked WHERE t.id = picked.id
                        RETURNING t.*
                    ), ended AS (
                        UPDATE downloadkit_lease l SET ended_at = clock_timestamp(), outcome = COALESCE(l.outcome, 'expired')
                        FROM claimed c WHERE l.task_id = c.id AND l.epoch < c.lease_epoch AND l.ended_at IS NULL
                    ), logged AS (
                        INSERT INTO downloadkit_lease (task_id, epoch, worker, acquired_at, valid_until)
                        SELECT id, lease_epoch, lease_owner, clock_timestamp(), lease_until FROM claimed
                    )
                    SELECT \(Self.taskColumns), now() AS server_now FROM claimed ORDER BY priority DESC, queue_order, id
                    """)
            query.binds.append(allowed)
            query.binds.append(worker)
            query.binds.append(seconds)
            query.binds.append(now)
            var leases: [Lease] = []
            for row in try await connection.query(query, logger: logger).collect() {
                let task = try Self.fleetTask(row.makeRandomAccess())
                leases.append(Lease(task: task.task, epoch: task.leaseEpoch, refusal: task.refusal))
            }
            try await connection.query(
                "UPDATE downloadkit_worker SET seen_at = now() WHERE id = \(worker)", logger: logger
            ).drain()
            return leases
        }
    }

    /// Renews `worker`'s leases (each by its epoch) for another `lease` and records the bytes each task has
    /// on disk. Returns the ids renewed: a lease not among them is lost (another worker holds a newer
    /// epoch, or the task was changed) and its worker must stop writing at once.
    public func renew(worker: String, leases: [(id: String, epoch: Int64, bytes: Int64)], lease: Duration) async throws
        -> Set<String>
    {
        guard !leases.isEmpty else { return [] }
        var query = PostgresQuery(
            unsafeSQL: """
                WITH h AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS h(id, epoch, bytes)),
                renewed AS (
                    UPDATE downloadkit_task t SET lease_until = now() + make_interval(secs => $4),
                        bytes_received = GREATEST(t.bytes_received, h.bytes)
                    FROM h WHERE t.id = h.id AND t.lease_epoch = h.epoch AND t.lease_owner = $5 AND t.state = 'running'
                    RETURNING t.id, t.lease_epoch, t.lease_until
                ), logged AS (
                    UPDATE downloadkit_lease l SET valid_until = r.lease_until
                    FROM renewed r WHERE l.task_id = r.id AND l.epoch = r.lease_epoch
                )
                SELECT id FROM renewed
                """)
        query.binds.append(leases.map(\.id))
        query.binds.append(leases.map(\.epoch))
        query.binds.append(leases.map(\.bytes))
        query.binds.append(lease / .seconds(1))
        query.binds.append(worker)
        var renewed: Set<String> = []
        for try await id in try await client.query(query, logger: logger).decode(String.self) { renewed.insert(id) }
        try await client.query("UPDATE downloadkit_worker SET seen_at = now() WHERE id = \(worker)", logger: logger)
            .drain()
        return renewed
    }

    /// Whether the database still names `worker` the holder of `lease` (its epoch, running, not run out):
    /// what a worker's fence asks before each checkpoint and the final rename.
    public func holds(_ lease: Lease, worker: String) async throws -> Bool {
        let rows = try await client.query(
            """
            SELECT 1 FROM downloadkit_task
            WHERE id = \(lease.task.id) AND lease_epoch = \(lease.epoch) AND lease_owner = \(worker)
                AND state = 'running' AND lease_until > now()
            """, logger: logger
        ).collect()
        return !rows.isEmpty
    }

    /// Records how a leased task ended — `completed` (with its result), `failed`, or back to `waiting`
    /// (released: the worker stopped, another may take it at once) — only if `worker` still holds the lease
    /// of `epoch`. Returns false (changing nothing) when the lease is lost.
    public func finish(_ lease: Lease, worker: String, as ending: LeaseEnding) async throws -> Bool {
        let task = lease.task
        let now = Date().timeIntervalSince1970
        var state: String
        var finalPath = task.path
        var bytes = task.bytesReceived
        var total = task.totalBytes
        var failure: ManagedTaskError?
        var finishedAt: Double?
        switch ending {
        case .completed(let result):
            state = "completed"
            finalPath = result.path
            bytes = result.bytes
            total = result.bytes
            finishedAt = now
        case .failed(let error, let received):
            state = "failed"
            bytes = received
            failure = ManagedTaskError(error)
            finishedAt = now
        case .released(let received, let totalBytes):
            state = "waiting"
            bytes = received
            if let totalBytes { total = totalBytes }
        }
        let outcome = state == "waiting" ? "released" : state
        return try await client.withTransaction(logger: logger) { connection in
            let rows = try await connection.query(
                """
                UPDATE downloadkit_task SET state = \(state), final_path = \(finalPath),
                    bytes_received = GREATEST(bytes_received, \(bytes)), total_bytes = \(total),
                    error_code = \(failure?.code.name), error_message = \(failure?.message),
                    error_category = \(failure?.category.rawValue), error_http_status = \(failure?.httpStatus.map(Int64.init)),
                    error_transient = \(failure?.isTransient), error_cause = \(failure?.cause?.storageText),
                    finished_at = \(finishedAt),
                    updated_at = \(now), lease_until = NULL
                WHERE id = \(task.id) AND lease_epoch = \(lease.epoch) AND lease_owner = \(worker)
                    AND (state = 'running' OR (state = 'paused' AND \(state) = 'completed'))
                RETURNING id
                """, logger: logger
            ).collect()
            guard !rows.isEmpty else { return false }
            try await connection.query(
                """
                UPDATE downloadkit_lease SET ended_at = clock_timestamp(), outcome = \(outcome)
                WHERE task_id = \(task.id) AND epoch = \(lease.epoch)
                """, logger: logger
            ).drain()
            return true
        }
    }

    /// Every lease ever granted, by task and epoch (who held it, from when, until when it was valid,
    /// how it ended): the record that shows no task was leased to two workers at once.
    public func leaseHistory() async throws -> [LeaseRecord] {
        let rows = try await client.query(
            """
            SELECT task_id, epoch, worker, acquired_at, valid_until, ended_at, outcome FROM downloadkit_lease
            ORDER BY task_id, epoch
            """, logger: logger)
        var records: [LeaseRecord] = []
        for try await (task, epoch, worker, acquired, valid, ended, outcome) in rows.decode(
            (String, Int64, String, Date, Date, Date?, String?).self)
        {
            records.append(
                LeaseRecord(
                    taskID: task, epoch: epoch, worker: worker, acquiredAt: acquired, validUntil: valid, endedAt: ended,
                    outcome: outcome))
        }
        return records
    }

    // MARK: - Events

    /// Every task's state and owner changes from the whole fleet, as they commit (LISTEN on the
    /// `downloadkit_task` channel over a connection of its own). The stream ends, with an error, when
    /// the connection is lost; a client that must not miss a change reads ``fleetTasks()`` after
    /// (re)subscribing, since NOTIFY is not stored for absent listeners.
    public func taskEvents() -> AsyncThrowingStream<FleetTaskEvent, any Error> {
        let (stream, continuation) = AsyncThrowingStream<FleetTaskEvent, any Error>.makeStream()
        let url = self.url
        let logger = self.logger
        let listener = Task {
            do {
                let connection = try await PostgresConnection.connect(
                    configuration: try url.connectionConfiguration(), id: 1, logger: logger)
                do {
                    try await connection.listen(on: "downloadkit_task") { notifications in
                        continuation.yield(.listening)
                        for try await notification in notifications {
                            if let event = FleetTaskEvent(payload: notification.payload) { continuation.yield(event) }
                        }
                    }
                    try? await connection.close()
                    continuation.finish()
                } catch {
                    try? await connection.close()
                    throw error
                }
            } catch is CancellationError {
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in listener.cancel() }
        return stream
    }

    // MARK: - Rows

    /// What the reads select: the task's own columns (``ownColumns``) and its lease.
    static let taskColumns = (ownColumns.map(\.name) + ["lease_owner", "lease_epoch", "lease_until"] + pieceColumns)
        .joined(separator: ", ")

    /// The task's piece-table row, read beside its own columns (NULL for a task without one). `id` is the task's
    /// column of whichever table or CTE the read selects from.
    static let pieceColumns = [("algorithm", "piece_algorithm"), ("piece_length", "piece_length"), ("digests", "piece_digests")]
        .map { "(SELECT p.\($0.0) FROM downloadkit_task_pieces p WHERE p.task_id = id) AS \($0.1)" }

    static func fleetTask(_ row: PostgresRandomAccessRow) throws -> FleetTask {
        let id = try row["id"].decode(String.self)
        let fileID = try row["file_id"].decode(String?.self)
        let columns = StoredTaskColumns(
            destination: DestinationColumns(
                kind: try row["destination_kind"].decode(String.self),
                path: try row["destination_path"].decode(String.self),
                namingRule: try row["naming_rule"].decode(String?.self),
                namingFileID: try row["naming_file_id"].decode(String?.self)),
            checksum: try row["checksum"].decode(String?.self),
            pieces: try row["piece_algorithm"].decode(String?.self).map { algorithm in
                // A value that does not decode reads as "not bytes" or a zero length: the task is refused
                // by name (StoredPieceTable.decoded), never run with its pieces unchecked.
                StoredPieceTable(
                    algorithm: algorithm, pieceLength: (try? row["piece_length"].decode(Int64.self)) ?? 0,
                    digests: (try? row["piece_digests"].decode(Data.self)).map { [UInt8]($0) })
            })
        let destination = columns.destination.destination(fileID: fileID, taskID: id)
        let errorCode = try row["error_code"].decode(String?.self)
        // The v2 columns are read leniently (a value that does not decode reads as NULL), and the connection
        // count falls back to the metadata key older builds wrote.
        func text(_ column: String) -> String? { (try? row[column].decode(String?.self)) ?? nil }
        func integer(_ column: String) -> Int64? { (try? row[column].decode(Int64?.self)) ?? nil }
        func flag(_ column: String) -> Bool? { (try? row[column].decode(Bool?.self)) ?? nil }
        let stored = ManagedTask.connections(
            stored: integer("connections"),
            metadata: TaskFieldsJSON.decode(try row["metadata"].decode(String?.self)))
        let task = ManagedTask(
            id: id, originalURL: try row["original_url"].decode(String.self),
            currentURL: try row["current_url"].decode(String.self), fileID: fileID, destination: destination,
            path: try row["final_path"].decode(String?.self),
            state: ManagedTaskState(rawValue: try row["state"].decode(String.self)) ?? .paused,
            bytesReceived: try row["bytes_received"].decode(Int64.self),
            totalBytes: try row["total_bytes"].decode(Int64?.self),
            priority: DownloadPriority(rawValue: Int(try row["priority"].decode(Int64.self))),
            queueOrder: try row["queue_order"].decode(Int64.self), group: try row["group_name"].decode(String?.self),
            checksum: columns.parsedChecksum,
            headers: TaskFieldsJSON.decode(try row["headers"].decode(String?.self)),
            metadata: stored.metadata,
            requiresUnmeteredNetwork: try row["requires_unmetered_network"].decode(Bool.self),
            rateLimit: try row["rate_limit"].decode(Int64?.self).map { Int(clamping: $0) },
            error: errorCode.map {
                ManagedTaskError(
                    storedCode: $0, message: text("error_message"), category: text("error_category"),
                    httpStatus: integer("error_http_status"), isTransient: flag("error_transient"),
                    cause: text("error_cause"))
            },
            createdAt: Date(timeIntervalSince1970: try row["created_at"].decode(Double.self)),
            updatedAt: Date(timeIntervalSince1970: try row["updated_at"].decode(Double.self)),
            finishedAt: try row["finished_at"].decode(Double?.self).map(Date.init(timeIntervalSince1970:)),
            connections: stored.connections,
            // Read leniently as the SQLite store does: anything but a JSON array of strings is no mirrors, a
            // count outside 1…64 is none.
            mirrors: TaskMirrorsJSON.decode(text("mirrors")),
            connectionsPerSource: ManagedTask.connectionsPerSource(stored: integer("connections_per_source")),
            pieceChecksums: columns.parsedPieces)
        let until = try row["lease_until"].decode(Date?.self)
        let serverNow = try row["server_now"].decode(Date.self)
        return FleetTask(
            task: task, leaseOwner: try row["lease_owner"].decode(String?.self),
            leaseEpoch: try row["lease_epoch"].decode(Int64.self), leaseUntil: until,
            leaseIsLive: task.state == .running && (until.map { $0 > serverNow } ?? false),
            refusal: columns.refusal)
    }
}


extension PostgresRowSequence {
    /// Reads and drops every row (a statement's rows must be consumed before the connection moves on).
    func drain() async throws {
        for try await _ in self {}
    }
}
