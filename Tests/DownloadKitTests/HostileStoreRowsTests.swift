import Foundation
import GRDB
import TestOrigin
import Testing

import DownloadKit
@_spi(DownloadKitInternal) @testable import DownloadKitManager

/// Rows read back from the task store are input too (issue #20): a damaged or hand-edited
/// `tasks.sqlite` gets a typed error or a clamped value, never a trap.
@Suite("Manager: hostile task-store rows", .serialized)
struct HostileStoreRowsTests {
    /// Every column of the v4 schema, in order (v1's, then the typed error's and the connection count, then
    /// the mirrors, then the connections per source).
    static let columns = [
        "id", "originalURL", "currentURL", "fileID", "destinationKind", "destinationPath", "namingRule", "namingFileID",
        "finalPath", "state", "bytesReceived", "totalBytes", "priority", "queueOrder", "groupName", "checksum", "headers",
        "metadata", "requiresUnmeteredNetwork", "rateLimit", "errorCode", "errorMessage", "createdAt", "updatedAt",
        "finishedAt", "errorCategory", "errorHTTPStatus", "errorTransient", "errorCause", "connections",
        "mirrors", "connectionsPerSource",
    ]

    /// A task store as a damaged copy might hold it: the same columns, no NOT NULL constraints and no
    /// types; the migration recorded as applied so the store does not recreate the table.
    static func damagedStore(in state: String) async throws -> DatabaseQueue {
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        let queue = try DatabaseQueue(path: state + "/" + TaskStore.fileName)
        try await queue.write { db in
            try db.execute(sql: "CREATE TABLE task (\(Self.columns.joined(separator: ", ")), PRIMARY KEY (id))")
            try db.execute(sql: "CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
            try db.execute(sql: "INSERT INTO grdb_migrations VALUES ('v1: tasks'), ('v2: typed errors, connections'), ('v3: mirrors'), ('v4: connections per source')")
        }
        return queue
    }

    /// A row that survived a broken schema: required columns NULL. Before, GRDB's `row["…"]` trapped on it
    /// while the manager opened (the process died); now the manager refuses to open with `.storage`.
    @Test func aNullInARequiredColumnIsAStorageErrorNotATrap() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let queue = try await Self.damagedStore(in: state)
        try await queue.write { db in
            try db.execute(
                sql: "INSERT INTO task (id, originalURL, state, headers, metadata) VALUES ('t1', NULL, 'waiting', '{}', '{}')")
        }
        try queue.close()
        do {
            _ = try await DownloadManager(stateDirectory: state, configuration: managerConfiguration())
            Issue.record("a manager opened on a row with NULL required columns")
        } catch let error as DownloadManagerError {
            #expect(error.code == .storage, "\(error)")
        }
    }

    /// A relative or empty destination path in a row (no manager writes one: enqueue stores absolute
    /// paths) restores as a failed task with `invalidDestination`; before, the task ran and wrote its
    /// files relative to the manager's working directory (the test suite's run left a `.dkpart` and a
    /// `.dkresume` in the package root).
    @Test func aRelativeDestinationPathRestoresFailedAndWritesNothing() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let first = try await DownloadManager(stateDirectory: state, configuration: managerConfiguration())
        let relative = "dk-relative-\(UUID().uuidString).bin"
        let ids = try await first.enqueue([
            .init(url: "http://127.0.0.1:1/a.bin", destination: .file(scratch.file("a.bin"))),
            .init(url: "http://127.0.0.1:1/b.bin", destination: .file(scratch.file("b.bin"))),
        ])
        await first.close()
        let store = try TaskStore(directory: state)
        var records = try store.loadAll().filter { ids.contains($0.id) }.sorted { $0.id < $1.id }
        try #require(records.count == 2)
        for (index, path) in [relative, ""].enumerated() {
            records[index].destinationPath = path
            records[index].state = "waiting"
        }
        try store.write(records)

        let manager = try await DownloadManager(
            stateDirectory: state, configuration: managerConfiguration(startsRestoredTasks: true))
        for record in records {
            let task = await manager.task(record.id)
            #expect(task?.state == .failed)
            #expect(task?.error?.code == .invalidDestination, "\(String(describing: task?.error))")
        }
        await manager.close()
        let cwd = FileManager.default.currentDirectoryPath
        for leftover in [relative, relative + ".dkpart", relative + ".dkresume", ".dkpart", ".dkresume"] {
            #expect(!FileManager.default.fileExists(atPath: cwd + "/" + leftover), "\(leftover)")
        }
    }

    /// A checksum column that does not parse (a hand-edited or damaged row) restores the task failed with
    /// `invalidChecksum` naming the value; before, the value was dropped as it was read and the task ran
    /// and completed unverified. A sound checksum beside it still reads back as it was stored.
    @Test func aChecksumThatDoesNotParseRestoresFailedNotUnverified() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let sound = try #require(Checksum(parsing: "sha256=" + String(repeating: "ab", count: 32)))
        let first = try await DownloadManager(stateDirectory: state, configuration: managerConfiguration())
        let ids = try await first.enqueue([
            .init(url: "http://127.0.0.1:1/c.bin", destination: .file(scratch.file("c.bin")), checksum: sound),
            .init(url: "http://127.0.0.1:1/d.bin", destination: .file(scratch.file("d.bin")), checksum: sound),
        ])
        await first.close()
        let store = try TaskStore(directory: state)
        var records = try store.loadAll().filter { ids.contains($0.id) }
        try #require(records.count == 2)
        for index in records.indices {
            records[index].state = "paused"
            if records[index].id == ids[0] { records[index].checksum = "sha256=zz" }
        }
        try store.write(records)

        let manager = try await DownloadManager(stateDirectory: state, configuration: managerConfiguration())
        let damaged = await manager.task(ids[0])
        #expect(damaged?.state == .failed)
        #expect(damaged?.error?.code == .invalidChecksum, "\(String(describing: damaged?.error))")
        #expect(damaged?.error?.message.contains("sha256=zz") == true)
        let intact = await manager.task(ids[1])
        #expect(intact?.state == .paused)
        #expect(intact?.checksum == sound)
        await manager.close()
    }

    /// A relative destination given to enqueue is what the caller meant from where it stood: stored absolute.
    @Test func enqueueStoresRelativeDestinationsAbsolute() {
        let cwd = FileManager.default.currentDirectoryPath
        #expect(DestinationColumns.absolute(.file("out/x.bin")) == .file(cwd + "/out/x.bin"))
        #expect(DestinationColumns.absolute(.directory("d", naming: .md5OfURL)) == .directory(cwd + "/d", naming: .md5OfURL))
        #expect(DestinationColumns.absolute(.file("/abs/x.bin")) == .file("/abs/x.bin"))
        #expect(DestinationColumns(.file(cwd + "/x")).refusal == nil)
        #expect(DestinationColumns(.file("x")).refusal?.code == .invalidDestination)
    }

    /// The mirrors column as a damaged row may hold it: anything but a JSON array of strings (another
    /// type, broken JSON, an array with a number) reads as no mirrors; a sound array reads back as stored.
    @Test func aMirrorsValueThatIsNotAnArrayOfStringsReadsAsNone() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let first = try await DownloadManager(stateDirectory: state, configuration: managerConfiguration())
        var request = DownloadManager.TaskRequest(url: "http://127.0.0.1:1/m.bin", destination: .file(scratch.file("m.bin")))
        request.mirrors = ["http://127.0.0.1:1/m2.bin"]
        request.startsPaused = true
        let id = try await first.enqueue([request])[0]
        await first.close()
        let hostile: [(DatabaseValue, [String])] = [
            (#"["http://127.0.0.1:1/a", "http://127.0.0.1:1/b"]"#.databaseValue, ["http://127.0.0.1:1/a", "http://127.0.0.1:1/b"]),
            (#"["http://127.0.0.1:1/a", 5]"#.databaseValue, []), ("[".databaseValue, []),
            (#"{"a":"b"}"#.databaseValue, []), (Int64(7).databaseValue, []), (3.5.databaseValue, []),
            (Data([0xFF, 0x00]).databaseValue, []), (.null, []), ("".databaseValue, []),
        ]
        for (value, expected) in hostile {
            let queue = try DatabaseQueue(path: state + "/" + TaskStore.fileName)
            try await queue.write { db in
                try db.execute(sql: "UPDATE task SET mirrors = ? WHERE id = ?", arguments: [value, id])
            }
            try queue.close()
            let manager = try await DownloadManager(stateDirectory: state, configuration: managerConfiguration())
            #expect(await manager.task(id)?.mirrors == expected, "\(value)")
            #expect(await manager.task(id)?.state == .paused, "\(value)")
            await manager.close()
        }
    }

    /// The connections-per-source column as a damaged row may hold it: a count outside 1…64 or a value of
    /// another type reads as none (the configuration's); a sound count reads back as stored.
    @Test func aConnectionsPerSourceOutsideOneToSixtyFourReadsAsNone() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let first = try await DownloadManager(stateDirectory: state, configuration: managerConfiguration())
        var request = DownloadManager.TaskRequest(url: "http://127.0.0.1:1/c.bin", destination: .file(scratch.file("c.bin")))
        request.connectionsPerSource = 2
        request.startsPaused = true
        let id = try await first.enqueue([request])[0]
        await first.close()
        let hostile: [(DatabaseValue, Int?)] = [
            (Int64(3).databaseValue, 3), (Int64(0).databaseValue, nil), (Int64(65).databaseValue, nil),
            (Int64(-1).databaseValue, nil), (Int64.max.databaseValue, nil), (Int64.min.databaseValue, nil),
            // The column's INTEGER affinity stores the text "4" as 4; other text stays text.
            ("4".databaseValue, 4), ("four".databaseValue, nil), (3.5.databaseValue, nil), (.null, nil),
        ]
        for (value, expected) in hostile {
            let queue = try DatabaseQueue(path: state + "/" + TaskStore.fileName)
            try await queue.write { db in
                try db.execute(sql: "UPDATE task SET connectionsPerSource = ? WHERE id = ?", arguments: [value, id])
            }
            try queue.close()
            let manager = try await DownloadManager(stateDirectory: state, configuration: managerConfiguration())
            #expect(await manager.task(id)?.connectionsPerSource == expected, "\(value)")
            await manager.close()
        }
    }

    /// A waiting row whose queue order is near Int64.max: restoring it added the order step and trapped
    /// on the overflow (Scheduler.restore). Now the order is clamped, the task runs and new tasks queue
    /// behind it.
    @Test func aQueueOrderNearTheLimitIsClampedNotAnOverflow() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/a.bin", .resource(Resource(size: 64 << 10, seed: 71)))
        origin.serve("/b.bin", .resource(Resource(size: 64 << 10, seed: 72)))
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let first = try await DownloadManager(stateDirectory: state, configuration: managerConfiguration())
        let id = try await first.enqueue(url: origin.url("/a.bin"), destination: .file(scratch.file("a.bin")))
        await first.close()
        // The row as a waiting task with a hostile order (whatever the first manager got to do).
        try? FileManager.default.removeItem(atPath: scratch.file("a.bin"))
        let store = try TaskStore(directory: state)
        var record = try #require(try store.loadAll().first { $0.id == id })
        record.state = "waiting"
        record.bytesReceived = 0
        record.finalPath = nil
        record.finishedAt = nil
        record.queueOrder = Int64.max - 1
        try store.write([record])

        let manager = try await DownloadManager(
            stateDirectory: state, configuration: managerConfiguration(startsRestoredTasks: true))
        let second = try await manager.enqueue(url: origin.url("/b.bin"), destination: .file(scratch.file("b.bin")))
        #expect(await eventually { await manager.task(id)?.state == .completed })
        #expect(await eventually { await manager.task(second)?.state == .completed })
        await manager.close()
        #expect(fileMatchesPattern(scratch.file("a.bin"), size: 64 << 10, seed: 71))
    }

    /// Rows of random values — NULLs, extreme integers, reals, text that is almost a state, a URL or a
    /// path, blobs — in every column (fixed seeds, so a failure reproduces): the manager either opens and
    /// lists, schedules and closes without trapping, or refuses with `.storage`. Even seeds keep each
    /// column's type (extreme values, unknown states, bad URLs and paths) so the rows decode and reach the
    /// scheduler and the engine; odd seeds put anything anywhere. The task store's rows as a
    /// fuzzed input (issue #20; the libFuzzer targets cannot link GRDB, so this runs in the suite).
    @Test(arguments: 0..<40)
    func randomRowsGetATypedErrorOrAreReadNeverATrap(seed: UInt64) async throws {
        var random = SplitMix(seed: seed &+ 0x5EED)
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let queue = try await Self.damagedStore(in: state)
        var generated: [[DatabaseValue]] = []
        for index in 0..<8 {
            generated.append(Self.columns.map { column in
                column == "id"
                    ? "t\(index)".databaseValue
                    : seed % 2 == 0
                        ? Self.typedValue(for: column, scratch: scratch, &random)
                        : Self.randomValue(for: column, scratch: scratch, &random)
            })
        }
        let rows = generated
        try await queue.write { db in
            let marks = Array(repeating: "?", count: Self.columns.count).joined(separator: ", ")
            for row in rows {
                try db.execute(sql: "INSERT INTO task VALUES (\(marks))", arguments: StatementArguments(row))
            }
        }
        try queue.close()
        do {
            let manager = try await DownloadManager(
                stateDirectory: state, configuration: managerConfiguration(startsRestoredTasks: true))
            for task in await manager.allTasks() {
                _ = await manager.task(task.id)
                _ = task.group.map { _ in 0 }
            }
            // Let restored tasks start (bad URLs, paths and sizes reach the engine) before closing.
            try? await Task.sleep(for: .milliseconds(200))
            _ = await manager.waitingTaskIDs()
            _ = await manager.runningTaskIDs()
            await manager.close()
        } catch let error as DownloadManagerError {
            #expect(error.code == .storage, "seed \(seed): \(error)")
        }
    }

    static let integerColumns: Set = [
        "bytesReceived", "totalBytes", "priority", "queueOrder", "rateLimit", "errorHTTPStatus", "errorTransient",
        "connections", "connectionsPerSource",
    ]
    static let realColumns: Set = ["createdAt", "updatedAt", "finishedAt"]
    static let optionalColumns: Set = [
        "fileID", "namingRule", "namingFileID", "finalPath", "totalBytes", "groupName", "checksum",
        "headers", "metadata", "rateLimit", "errorCode", "errorMessage", "finishedAt", "errorCategory",
        "errorHTTPStatus", "errorTransient", "errorCause", "connections", "mirrors",
        "connectionsPerSource",
    ]

    /// A value of the column's own type, often extreme.
    static func typedValue(for column: String, scratch: ScratchDirectory, _ random: inout SplitMix) -> DatabaseValue {
        if optionalColumns.contains(column) && random.next() % 4 == 0 { return .null }
        if column == "requiresUnmeteredNetwork" { return (random.next() % 2 == 0).databaseValue }
        if integerColumns.contains(column) {
            return random.next() % 2 == 0
                ? [Int64.min, Int64.max, -1, 0, 1, 1 << 40].randomElement(using: &random)!.databaseValue
                : Int64(bitPattern: random.next()).databaseValue
        }
        if realColumns.contains(column) {
            return [1e300, -1e300, 0, -1, 1.7e9, Double(Int64.max), 253_402_300_800].randomElement(using: &random)!
                .databaseValue
        }
        switch column {
        case "originalURL", "currentURL":
            return ["http://127.0.0.1:1/x.bin", "https://[::1]:1/", "ftp://x/", "http://", "not a url", ""]
                .randomElement(using: &random)!.databaseValue
        case "mirrors":
            return [#"["http://127.0.0.1:1/m.bin"]"#, #"["ftp://x/", "not a url", ""]"#, #"[1, null]"#, "[", "{}", "[]"]
                .randomElement(using: &random)!.databaseValue
        case "destinationPath", "finalPath":
            return [scratch.file("r\(random.next() % 100)"), "/", "", "../../x", scratch.file("d/")]
                .randomElement(using: &random)!.databaseValue
        default:
            // Text: almost a state, a kind, a naming rule, JSON or a checksum; or long, or with a NUL.
            return random.next() % 5 == 0
                ? String(repeating: "\u{1F600}", count: Int(random.next() % 300)).databaseValue
                : Self.words.randomElement(using: &random)!.databaseValue
        }
    }

    static let words = [
        "waiting", "running", "paused", "completed", "failed", "cancelled", "", "directory", "file", "md5OfURL",
        "fileID", "fromResponse", "{}", "{\"a\":\"b\"}", "{\"a\":", "sha256=00", "sha256=zz", "\u{0}",
        "httpStatus", "network", "transport|connectTimeout|110|connect", "fileSystem||x|", "|||", "other",
    ]

    static func randomValue(for column: String, scratch: ScratchDirectory, _ random: inout SplitMix) -> DatabaseValue {
        switch random.next() % 9 {
        case 0: return .null
        case 1: return [Int64.min, Int64.max, -1, 0, 1, Int64.max - 1, Int64.min + 1].randomElement(using: &random)!.databaseValue
        case 2: return Int64(bitPattern: random.next()).databaseValue
        case 3: return [Double.infinity, -Double.infinity, 1e300, -1e300, 0.5, -0.0].randomElement(using: &random)!.databaseValue
        case 4: return words.randomElement(using: &random)!.databaseValue
        case 5:
            return ["http://127.0.0.1:1/x.bin", "https://[::1]:1/", "ftp://x/", "http://", "not a url",
                scratch.file("r\(random.next() % 100)"), "/", "", "../../etc/passwd"]
                .randomElement(using: &random)!.databaseValue
        case 6: return String(repeating: "\u{1F600}", count: Int(random.next() % 300)).databaseValue
        case 7: return Data((0..<Int(random.next() % 64)).map { _ in UInt8(truncatingIfNeeded: random.next()) }).databaseValue
        default: return (Double(Int64(bitPattern: random.next())) / 1e6).databaseValue
        }
    }
}

/// The suite's SplitMix64 (SegmentScheduleTests) as a generator for `randomElement(using:)`.
extension SplitMix: RandomNumberGenerator {}

/// Task identifiers come from getrandom, not Foundation's /dev/urandom per call: still RFC 9562 version 4.
@Suite struct TaskIdentifierTests {
    @Test func identifiersAreLowerCaseVersion4UUIDsAndDistinct() {
        let ids = (0..<1_000).map { _ in TaskIdentifier.make() }
        #expect(Set(ids).count == ids.count)
        for id in ids.prefix(50) {
            let characters = Array(id)
            #expect(id.count == 36 && id == id.lowercased(), "\(id)")
            #expect(UUID(uuidString: id) != nil, "\(id)")
            #expect(characters[14] == "4", "\(id)")
            #expect("89ab".contains(characters[19]), "\(id)")
        }
    }
}
