import DownloadKitManager
import DownloadKitSession
import Foundation
import GRDB

/// A session's durable event log: tables `session_event`, `session_task` and `session_meta` in the
/// session's `tasks.sqlite` (beside the manager's `task` table; docs/DAEMON.md has the schema).
///
/// Sequence numbers come from `session_meta.lastSeq`, so they are never reused even after acknowledged
/// events are deleted. `session_task` keeps each task's last logged event kind: it is what
/// ``EventRules`` decides from, so a transition is logged once even when the daemon restarts between
/// the manager's write and the log's (see ``EventRules/reconcile(tasks:lastLogged:)``).
/// Not thread-safe by itself: one ``SessionHost`` queue uses it.
final class EventLog {
    private let database: DatabaseQueue
    /// The highest sequence number written.
    private(set) var lastSeq: Int64
    /// Events up to this one were acknowledged (and deleted).
    private(set) var acknowledged: Int64
    /// Each live task's last logged event kind.
    private(set) var lastKind: [String: SessionEventKind]

    /// Opens (creating the tables if needed) the log in `path`.
    init(path: String) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        database = try DatabaseQueue(path: path, configuration: configuration)
        (lastSeq, acknowledged, lastKind) = try database.write { db in
            try db.execute(sql: "PRAGMA journal_mode = WAL")
            try db.execute(
                sql: """
                    CREATE TABLE IF NOT EXISTS session_meta (key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
                    CREATE TABLE IF NOT EXISTS session_event (
                        seq INTEGER PRIMARY KEY NOT NULL, kind TEXT NOT NULL, task TEXT NOT NULL, time REAL NOT NULL,
                        url TEXT, path TEXT, bytes INTEGER, checksum TEXT, errorCode TEXT, errorDetail TEXT);
                    CREATE TABLE IF NOT EXISTS session_task (id TEXT PRIMARY KEY NOT NULL, lastKind TEXT NOT NULL);
                    INSERT OR IGNORE INTO session_meta (key, value) VALUES ('schemaVersion', 1), ('lastSeq', 0), ('acknowledged', 0);
                    """)
            // The typed error (a SessionTaskError as JSON), added after schemaVersion 1's first release: a log
            // created before has no such column until now, and its rows read with no typed error.
            if try !db.columns(in: "session_event").contains(where: { $0.name == "error" }) {
                try db.execute(sql: "ALTER TABLE session_event ADD COLUMN error TEXT")
            }
            let meta = try [String: Int64](
                uniqueKeysWithValues: Row.fetchAll(db, sql: "SELECT key, value FROM session_meta").map { ($0["key"], $0["value"]) })
            var kinds: [String: SessionEventKind] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT id, lastKind FROM session_task") {
                // A kind written by a newer daemon reads as unknown: no transition is suppressed for it.
                if let kind = SessionEventKind(rawValue: row["lastKind"]) { kinds[row["id"]] = kind }
            }
            return (meta["lastSeq"] ?? 0, meta["acknowledged"] ?? 0, kinds)
        }
    }

    /// Appends events in one transaction (numbering them) and returns them numbered. The URL is stored
    /// and returned as listings show it (``TaskURLRedaction/listing(_:)``: no password), so neither the
    /// log nor a client reading events ever gets the userinfo password.
    func append(_ events: [SessionEvent]) throws -> [SessionEvent] {
        guard !events.isEmpty else { return [] }
        var numbered = events
        var seq = lastSeq
        for index in numbered.indices {
            seq += 1
            numbered[index].seq = seq
            numbered[index].url = numbered[index].url.map(TaskURLRedaction.listing)
        }
        try database.write { db in
            for event in numbered {
                try db.execute(
                    sql: """
                        INSERT INTO session_event (seq, kind, task, time, url, path, bytes, checksum, errorCode, errorDetail, error)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        event.seq, event.kind.rawValue, event.task, event.time, event.url, event.path, event.bytes,
                        event.checksum, event.errorCode, event.errorDetail, event.error.flatMap(Self.json),
                    ])
                if event.kind == .removed {
                    try db.execute(sql: "DELETE FROM session_task WHERE id = ?", arguments: [event.task])
                } else {
                    try db.execute(
                        sql: "INSERT OR REPLACE INTO session_task (id, lastKind) VALUES (?, ?)",
                        arguments: [event.task, event.kind.rawValue])
                }
            }
            try db.execute(sql: "UPDATE session_meta SET value = ? WHERE key = 'lastSeq'", arguments: [seq])
        }
        lastSeq = seq
        for event in numbered {
            lastKind[event.task] = event.kind == .removed ? nil : event.kind
        }
        return numbered
    }

    /// Unacknowledged events with a sequence number above `after`, oldest first, at most `limit`.
    /// Rows a newer daemon wrote with an unknown kind are skipped (and counted in `skipped`). `through`
    /// is the sequence number the reader has now seen everything up to.
    func events(after: Int64, limit: Int) throws -> (events: [SessionEvent], skipped: Int, through: Int64) {
        let rows = try database.read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM session_event WHERE seq > ? ORDER BY seq LIMIT ?",
                arguments: [max(after, acknowledged), limit])
        }
        var events: [SessionEvent] = []
        var skipped = 0
        for row in rows {
            guard let kind = SessionEventKind(rawValue: row["kind"]) else {
                skipped += 1
                continue
            }
            events.append(
                SessionEvent(
                    seq: row["seq"], kind: kind, task: row["task"], time: row["time"], url: row["url"], path: row["path"],
                    bytes: row["bytes"], checksum: row["checksum"], errorCode: row["errorCode"], errorDetail: row["errorDetail"],
                    error: Self.typedError(row["error"])))
        }
        let lastRow: Int64? = rows.last?["seq"]
        let through = rows.count < limit ? max(lastSeq, after) : (lastRow ?? after)
        return (events, skipped, through)
    }

    /// A typed error as the `error` column keeps it.
    private static func json(_ error: SessionTaskError) -> String? {
        (try? JSONEncoder().encode(error)).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The `error` column read back; nil for NULL or text that does not decode (a damaged row loses only
    /// the typed fields, never the event).
    private static func typedError(_ value: DatabaseValue) -> SessionTaskError? {
        guard case .string(let text) = value.storage else { return nil }
        return try? JSONDecoder().decode(SessionTaskError.self, from: Data(text.utf8))
    }

    /// Marks events up to `seq` (at most the last written) handled and deletes them.
    func acknowledge(upTo seq: Int64) throws {
        let upTo = min(seq, lastSeq)
        guard upTo > acknowledged else { return }
        try database.write { db in
            try db.execute(sql: "DELETE FROM session_event WHERE seq <= ?", arguments: [upTo])
            try db.execute(sql: "UPDATE session_meta SET value = ? WHERE key = 'acknowledged'", arguments: [upTo])
        }
        acknowledged = upTo
    }
}
