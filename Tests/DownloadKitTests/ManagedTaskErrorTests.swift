import Foundation
import GRDB
import Glibc
import HTTPClient
import HTTPWire
import TestOrigin
import Testing

@_spi(DownloadKitInternal) @testable import DownloadKit
@_spi(DownloadKitInternal) @testable import DownloadKitManager

/// The task's error keeps the download's typed fields past the manager (issue #46): the mapping from a
/// download error, the SQLite round trip, rows written before the typed columns, and the one task →
/// request mapping.
@Suite("Manager: typed task errors", .serialized)
struct ManagedTaskErrorTests {
    /// One row per kind of failure: the download error, then the task error's fields.
    @Test func aDownloadErrorKeepsItsTypedFieldsInTheTaskError() {
        let url = try! HTTPURL("http://example.com/a.bin")
        let rows: [(DownloadError, DownloadError.Code, DownloadError.Category, Int?, Bool, ManagedTaskError.Cause?)] = [
            (DownloadError.status(404, reason: "", url: url), .httpStatus, .httpStatus, 404, false, nil),
            (DownloadError.status(503, reason: "", url: url), .httpStatus, .httpStatus, 503, true, nil),
            (
                DownloadError.wrap(TransportError(.connectTimeout, errorNumber: .timedOut, operation: "connect", detail: "t")),
                .transport, .network, nil, true,
                ManagedTaskError.Cause(layer: .transport, code: "connectTimeout", errorNumber: .timedOut, operation: "connect")
            ),
            (
                DownloadError.wrap(TransportError(.certificateExpired, detail: "expired")), .transport, .tls, nil, false,
                ManagedTaskError.Cause(layer: .transport, code: "certificateExpired")
            ),
            (
                DownloadError.wrap(FileSystemError("mkdir", path: "/x", errorNumber: .permissionDenied)), .fileSystem, .fileSystem, nil,
                false, ManagedTaskError.Cause(layer: .fileSystem, errorNumber: .permissionDenied, operation: "mkdir")
            ),
            (
                DownloadError.wrap(FileSystemError("pwrite", path: "/x", errorNumber: .noSpace)), .diskFull, .space, nil, false,
                ManagedTaskError.Cause(layer: .fileSystem, errorNumber: .noSpace, operation: "pwrite")
            ),
            (
                DownloadError.wrap(WireError(.truncatedBody, "short")), .truncated, .network, nil, true,
                ManagedTaskError.Cause(layer: .wire, code: "truncatedBody")
            ),
            (DownloadError(.checksumMismatch, "sha256 differs"), .checksumMismatch, .integrity, nil, false, nil),
            (DownloadError.wrap(NSError(domain: "x", code: 1)), .internalError, .other, nil, false, ManagedTaskError.Cause(layer: .other)),
        ]
        for (download, code, category, status, transient, cause) in rows {
            let error = ManagedTaskError(download)
            #expect(error.code == code, "\(download)")
            #expect(error.category == category, "\(download)")
            #expect(error.httpStatus == status, "\(download)")
            #expect(error.isTransient == transient, "\(download)")
            #expect(error.cause == cause, "\(download)")
            #expect(error.message == download.detail)
            // What a task handle throws is the same error again.
            #expect(error.downloadError.code == download.code && error.downloadError.category == download.category)
            #expect(error.downloadError.httpStatus == download.httpStatus)
            // The stored form reads back as the same cause.
            if let cause { #expect(ManagedTaskError.Cause(storageText: cause.storageText) == cause) }
        }
    }

    /// The cause's error number is typed now (issue #46); its coded forms are the old ones: the JSON key
    /// `errno` holding a bare number (absent without one) and the stored text `layer|code|errno|operation`.
    /// What the old build wrote reads back, and the new build writes exactly what the old one did.
    @Test func aCauseWrittenByTheOldBuildReadsAndIsWrittenUnchanged() throws {
        let cause = ManagedTaskError.Cause(layer: .transport, code: "readTimeout", errorNumber: .timedOut, operation: "recv")
        let bare = ManagedTaskError.Cause(layer: .other)
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        for (value, old) in [
            (cause, #"{"code":"readTimeout","errno":110,"layer":"transport","operation":"recv"}"#), (bare, #"{"layer":"other"}"#),
        ] {
            #expect(try JSONDecoder().decode(ManagedTaskError.Cause.self, from: Data(old.utf8)) == value)
            #expect(String(decoding: try encoder.encode(value), as: UTF8.self) == old)
        }
        #expect(ManagedTaskError.Cause(storageText: "transport|readTimeout|110|recv") == cause)
        #expect(cause.storageText == "transport|readTimeout|110|recv")
        #expect(ManagedTaskError.Cause(storageText: "fileSystem||28|pwrite")?.errorNumber == .noSpace)
    }

    /// Every typed field, the connection counts and the mirrors survive the SQLite store.
    @Test func theSQLiteStoreRoundTripsEveryTypedField() async throws {
        let scratch = try ScratchDirectory()
        let store = try TaskStore(directory: scratch.file("state"))
        var task = Self.task(id: "t1")
        task.state = .failed
        task.connections = 6
        task.connectionsPerSource = 3
        task.mirrors = ["http://b.example/a", "https://c.example/pub/a?x=\"y\""]
        task.error = ManagedTaskError(
            code: .transport, category: .network, httpStatus: nil, isTransient: true,
            cause: ManagedTaskError.Cause(layer: .transport, code: "readTimeout", errorNumber: .timedOut, operation: "recv"),
            message: "timeout: no bytes for 30 s")
        var second = Self.task(id: "t2")
        second.state = .failed
        second.error = ManagedTaskError(code: .httpStatus, category: .httpStatus, httpStatus: 410, message: "Gone")
        try await store.save([task, second], deleting: [])
        let reopened = try TaskStore(directory: scratch.file("state"))
        let loaded = Dictionary(uniqueKeysWithValues: try await reopened.loadTasks().map { ($0.id, $0) })
        #expect(loaded["t1"] == task)
        #expect(loaded["t2"] == second)
        #expect(try reopened.appliedMigrations() == ["v1: tasks", "v2: typed errors, connections", "v3: mirrors", "v4: connections per source", "v5: piece tables"])
    }

    /// A database written before the typed columns (schema v1: code and message only, the connection count
    /// as a metadata key) opens, migrates and reads each error as a sensible typed value.
    @Test func aVersionOneRowReadsAsATypedErrorAndKeepsItsConnections() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        let queue = try DatabaseQueue(path: state + "/" + TaskStore.fileName)
        try TaskStore.migrator.migrate(queue, upTo: "v1: tasks")
        try await queue.write { db in
            for (id, code, message, metadata) in [
                ("old-404", "httpStatus", "HTTP status 404 Not Found from http://x/a", #"{"downloadkit.connections":"4","title":"A"}"#),
                ("old-full", "diskFull", "the disk is full", "{}"),
                ("old-new", "someNewerCode", "from a newer build", #"{"downloadkit.connections":"900"}"#),
            ] {
                try db.execute(
                    sql: """
                        INSERT INTO task (id, originalURL, currentURL, destinationKind, destinationPath, state,
                            queueOrder, headers, metadata, errorCode, errorMessage, createdAt, updatedAt)
                        VALUES (?, ?, ?, 'file', ?, 'failed', 1, '{}', ?, ?, ?, 0, 0)
                        """,
                    arguments: ["\(id)", "http://127.0.0.1:1/\(id)", "http://127.0.0.1:1/\(id)", scratch.file(id), metadata, code, message])
            }
        }
        try queue.close()

        let store = try TaskStore(directory: state)
        let tasks = Dictionary(uniqueKeysWithValues: try await store.loadTasks().map { ($0.id, $0) })
        let old404 = try #require(tasks["old-404"]?.error)
        #expect(old404.code == .httpStatus && old404.category == .httpStatus)
        #expect(old404.httpStatus == nil && !old404.isTransient && old404.cause == nil)
        #expect(tasks["old-404"]?.connections == 4)
        #expect(tasks["old-404"]?.metadata == ["title": "A"])
        #expect(tasks["old-full"]?.error?.category == .space)
        // A code this build does not know: kept as given, category `other`; a count outside 1…64: none.
        #expect(tasks["old-new"]?.error?.code.name == "someNewerCode" && tasks["old-new"]?.error?.category == .other)
        #expect(tasks["old-new"]?.connections == nil)

        // Written back, the count moves to its column and the metadata key is gone.
        try await store.save([try #require(tasks["old-404"])], deleting: [])
        let raw = try DatabaseQueue(path: state + "/" + TaskStore.fileName).read { db in
            try Row.fetchOne(db, sql: "SELECT connections, metadata FROM task WHERE id = 'old-404'")
        }
        let connections: Int64? = raw?["connections"]
        let metadata: String? = raw?["metadata"]
        #expect(connections == 4)
        #expect(metadata == #"{"title":"A"}"#)
    }

    /// Hostile values in the typed columns (text where a number goes, an unknown category, a cause that is
    /// not one, an out-of-range status) read as "absent", never a trap or a refused store.
    @Test func hostileTypedColumnsReadAsAbsent() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let store = try TaskStore(directory: state)
        var task = Self.task(id: "h1")
        task.state = .failed
        task.error = ManagedTaskError(code: .httpStatus, message: "x")
        try await store.save([task], deleting: [])
        let queue = try DatabaseQueue(path: state + "/" + TaskStore.fileName)
        let rows: [[DatabaseValue]] = [
            ["bogus".databaseValue, "four-oh-four".databaseValue, "yes".databaseValue, "x|y".databaseValue, "many".databaseValue],
            ["network".databaseValue, Int64.max.databaseValue, 7.databaseValue, "transport|||".databaseValue, 0.databaseValue],
            ["".databaseValue, (-1).databaseValue, .null, "fileSystem||notanumber|open".databaseValue, (-5).databaseValue],
            [.null, 1.5.databaseValue, 2.5.databaseValue, String(repeating: "|", count: 5000).databaseValue, Int64.min.databaseValue],
        ]
        for row in rows {
            try await queue.write { db in
                try db.execute(
                    sql: """
                        UPDATE task SET errorCategory = ?, errorHTTPStatus = ?, errorTransient = ?, errorCause = ?,
                            connections = ? WHERE id = 'h1'
                        """, arguments: StatementArguments(row))
            }
            let loaded = try #require(try await TaskStore(directory: state).loadTasks().first)
            let error = try #require(loaded.error)
            #expect(error.code == .httpStatus)
            #expect(error.httpStatus == nil, "\(row)")
            #expect(loaded.connections == nil, "\(row)")
            #expect([DownloadError.Category.httpStatus, .network].contains(error.category), "\(row)")
            if case .string(let text) = row[3].storage, text == "transport|||" {
                #expect(error.cause == ManagedTaskError.Cause(layer: .transport))
            } else {
                #expect(error.cause == nil, "\(row)")
            }
        }
        try queue.close()
    }

    /// The one task → (request, configuration) mapping the manager and the fleet's worker share.
    @Test func aTaskMapsToOneRequestAndConfiguration() {
        var task = Self.task(id: "m1")
        task.headers = ["X-B": "2", "X-A": "1"]
        task.currentURL = "http://127.0.0.1:1/refreshed"
        task.checksum = Checksum(algorithm: .sha256, expectedHex: String(repeating: "0", count: 64))
        task.connections = 8
        var base = DownloadConfiguration()
        base.rateLimit = 1000
        base.connections = 2
        let limiters = [TokenBucket(bytesPerSecond: 10), TokenBucket(bytesPerSecond: 20)]
        let (request, configuration) = task.download(base: base, limiters: limiters, extraHeaders: [("X-W", "w1")])
        #expect(request.url == task.originalURL && request.replacementURL == "http://127.0.0.1:1/refreshed")
        #expect(request.destination == task.destination && request.checksum == task.checksum)
        #expect(request.headers.map { "\($0.name)=\($0.value)" } == ["X-A=1", "X-B=2", "X-W=w1"])
        #expect(configuration.rateLimit == nil && configuration.connections == 8)
        #expect(configuration.sharedRateLimiters.count == base.sharedRateLimiters.count + 2)

        task.connections = nil
        task.currentURL = task.originalURL
        let (plain, defaults) = task.download(base: base, limiters: [])
        #expect(plain.replacementURL == nil && defaults.connections == 2)
    }

    static func task(id: String) -> ManagedTask {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        return ManagedTask(
            id: id, originalURL: "http://127.0.0.1:1/\(id)", currentURL: "http://127.0.0.1:1/\(id)", fileID: nil,
            destination: .file("/tmp/dk-typed-\(id)"), path: "/tmp/dk-typed-\(id)", state: .paused, bytesReceived: 0,
            totalBytes: nil, priority: .normal, queueOrder: 1, group: nil, checksum: nil, headers: [:], metadata: [:],
            requiresUnmeteredNetwork: false, rateLimit: nil, error: nil, createdAt: now, updatedAt: now, finishedAt: nil)
    }
}
