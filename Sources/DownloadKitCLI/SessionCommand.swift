import ArgumentParser
import DownloadKitManager
import DownloadKitSession
import Foundation

/// `downloadkit session ID ACTION …`: a client of `downloadkitd` (docs/DAEMON.md). Starts nothing in
/// this process: every action is a request to the daemon.
struct SessionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "session",
        abstract: "Hand downloads to the background daemon and read the events of a session.",
        usage: """
            downloadkit session ID add URL [URL ...] [-o FILE | -d DIR] [options]
            downloadkit session ID list [--json]
            downloadkit session ID pause|resume|cancel|remove TASK ...
            downloadkit session ID events [--json] [--follow]
            """,
        discussion: """
            add: prints one task id per line and returns at once; the daemon downloads. \
            events: prints the session's events not yet acknowledged (json: one object per line with \
            `event`, `seq`, `task` and, for finished tasks, `path`, `bytes` and `checksum`) and acknowledges \
            them when it exits 0; with --follow it keeps printing live events until every task of the \
            session has ended. Every action fails with an `error:` line naming the socket when no daemon \
            answers.
            """)

    enum Action: String, ExpressibleByArgument, CaseIterable {
        case add, list, pause, resume, cancel, remove, events
    }

    @Argument(help: "The session identifier (A-Z a-z 0-9 . _ -, at most 128).")
    var identifier: String

    @Argument(help: "add, list, pause, resume, cancel, remove or events.")
    var action: Action

    @Argument(help: "URLs (add) or task ids (pause, resume, cancel, remove).")
    var items: [String] = []

    @Option(name: .customLong("socket"), help: "The daemon's socket (default: $XDG_RUNTIME_DIR/downloadkit/daemon.sock).")
    var socket: String?

    @Option(name: .customShort("o"), help: "add: destination file (a single URL only).")
    var output: String?

    @Option(name: .customShort("d"), help: "add: destination directory (default: the current directory).")
    var directory: String?

    @Option(name: .customLong("file-id"), help: "add: your id for the file (a single URL only).")
    var fileID: String?

    @Option(name: .customLong("checksum"), help: "add: ALGO=HEX (sha256, sha1, md5), checked before the final rename.")
    var checksum: String?

    @Option(name: .customLong("header"), help: "add: extra request header 'Name: value' (repeatable).")
    var headers: [String] = []

    @Option(name: .customLong("priority"), parsing: .unconditional, help: "add: higher runs first (default 0).")
    var priority: Int?

    @Option(name: .customLong("group"), help: "add: a group name.")
    var group: String?

    @Option(name: .customLong("connections"), help: "add: range connections per file.")
    var connections: Int?

    @Option(name: .customLong("limit-rate"), help: "add: bytes per second per file, e.g. 500K, 10M.")
    var limitRate: String?

    @Flag(name: .customLong("delete-files"), help: "remove: also delete finished files.")
    var deleteFiles = false

    @Flag(name: .customLong("json"), help: "list, events: one JSON object per line.")
    var json = false

    @Flag(name: .customLong("follow"), help: "events: keep printing live events until every task has ended.")
    var follow = false

    mutating func validate() throws {
        guard SessionProtocol.isValidIdentifier(identifier) else {
            throw ValidationError("the session identifier must be 1–128 of A-Z a-z 0-9 . _ -")
        }
        switch action {
        case .add:
            if items.isEmpty { throw ValidationError("give at least one URL") }
            if output != nil && directory != nil { throw ValidationError("-o and -d cannot be used together") }
            if items.count > 1 && (output != nil || fileID != nil || checksum != nil) {
                throw ValidationError("-o, --file-id and --checksum take a single URL")
            }
            if let checksum, !Self.isChecksum(checksum) {
                throw ValidationError("--checksum must be ALGO=HEX with ALGO sha256, sha1 or md5")
            }
            if let connections, connections < 1 || connections > 64 { throw ValidationError("--connections must be 1…64") }
            if let limitRate, RateParser.parse(limitRate) == nil { throw ValidationError("--limit-rate must look like 500K or 10M") }
            for header in headers where HeaderParser.parse(header) == nil {
                throw ValidationError("--header must be 'Name: value': \(header)")
            }
        case .pause, .resume, .cancel, .remove:
            if items.isEmpty { throw ValidationError("give at least one task id") }
        case .list, .events:
            if !items.isEmpty { throw ValidationError("\(action.rawValue) takes no further arguments") }
        }
    }

    static func isChecksum(_ text: String) -> Bool {
        let parts = text.split(separator: "=", maxSplits: 1)
        let lengths = ["sha256": 64, "sha1": 40, "md5": 32]
        guard parts.count == 2, let length = lengths[parts[0].lowercased()] else { return false }
        return parts[1].count == length && parts[1].allSatisfy(\.isHexDigit)
    }

    func run() async throws {
        let session = BackgroundSession(identifier: identifier, socketPath: socket.map(Self.absolute))
        defer { session.close() }
        do {
            switch action {
            case .add: try await add(session)
            case .list: try await list(session)
            case .pause: try await session.pause(items)
            case .resume: try await session.resume(items)
            case .cancel: try await session.cancel(items)
            case .remove: try await session.remove(items, deletingFiles: deleteFiles)
            case .events: try await events(session)
            }
        } catch let error as SessionError {
            FileHandle.standardError.write(Data("error: \(error.detail)\n".utf8))
            throw ExitCode(error.code == .daemonUnavailable ? 69 : 1)
        }
    }

    private static func absolute(_ path: String) -> String {
        path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }

    private func add(_ session: BackgroundSession) async throws {
        var headerFields: [String: String] = [:]
        for header in headers {
            if let (name, value) = HeaderParser.parse(header) { headerFields[name] = value }
        }
        let requests = items.map { url in
            SessionTaskRequest(
                url: url, file: output.map(Self.absolute),
                directory: output == nil ? Self.absolute(directory ?? ".") : nil, fileID: fileID, checksum: checksum,
                headers: headerFields.isEmpty ? nil : headerFields, priority: priority, group: group,
                connections: connections, rateLimit: limitRate.flatMap(RateParser.parse))
        }
        for id in try await session.enqueue(requests) { print(id) }
    }

    private func list(_ session: BackgroundSession) async throws {
        let tasks = try await session.list()
        if json {
            for task in tasks {
                var object: [String: Any] = [
                    "id": task.id, "state": task.state, "url": TaskURLRedaction.listing(task.url), "bytes": task.bytesReceived,
                    "priority": task.priority,
                ]
                object["total"] = task.totalBytes
                object["path"] = task.path
                object["group"] = task.group
                object["error"] = task.errorDetail
                print(Self.jsonLine(object))
            }
        } else {
            for task in tasks {
                let total = task.totalBytes.map(String.init) ?? "?"
                print("\(task.id)  \(task.state)  \(task.bytesReceived)/\(total)  \(TaskURLRedaction.listing(task.url))  \(task.path ?? "-")")
            }
        }
    }

    /// Prints unacknowledged events (and, with --follow, live ones until every task has ended), then
    /// acknowledges what it printed.
    private func events(_ session: BackgroundSession) async throws {
        try await session.connect()
        let stream = session.events
        var target = try await stopPoint(session)
        var printed: Int64 = 0
        if let stop = target, stop.seq <= stop.acknowledged {
            return
        }
        for await event in stream {
            printLine(event)
            printed = event.seq
            if follow && event.kind.isTerminal { target = try await stopPoint(session) }
            if let stop = target, event.seq >= stop.seq { break }
        }
        if let error = session.lastError { throw error }
        if printed > 0 { try await session.acknowledge(upTo: printed) }
    }

    /// The sequence number to stop after: without --follow the last one written now; with it, the last
    /// one written once every task has ended (nil while some task may still run).
    private func stopPoint(_ session: BackgroundSession) async throws -> (seq: Int64, acknowledged: Int64)? {
        let (tasks, position) = try await session.status()
        if follow && !tasks.allSatisfy(\.hasEnded) { return nil }
        return (position.lastSequence, position.acknowledged)
    }

    private func printLine(_ event: SessionEvent) {
        if json {
            var object: [String: Any] = ["event": event.kind.rawValue, "seq": event.seq, "task": event.task, "time": event.time]
            object["url"] = event.url.map(TaskURLRedaction.listing)
            object["path"] = event.path
            object["bytes"] = event.bytes
            object["checksum"] = event.checksum
            object["errorCode"] = event.errorCode
            object["errorDetail"] = event.errorDetail
            print(Self.jsonLine(object))
        } else {
            var line = "\(event.seq) \(event.kind.rawValue) \(event.task)"
            if let path = event.path, event.kind == .finished { line += " \(path)" }
            if let checksum = event.checksum { line += " \(checksum)" }
            if let code = event.errorCode { line += " \(code): \(event.errorDetail ?? "")" }
            print(line)
        }
        fflush(nil)
    }

    private static func jsonLine(_ object: [String: Any]) -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else {
            return "{}"
        }
        return String(decoding: data, as: UTF8.self)
    }
}
