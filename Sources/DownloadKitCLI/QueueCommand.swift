import ArgumentParser
import DownloadKit
import DownloadKitManager
import Foundation

/// `downloadkit queue`: a persistent download queue (like aria2's session) on top of `DownloadManager`.
struct QueueCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "queue",
        abstract: "A persistent download queue: add URLs, then run the queue; kill -9 safe.",
        discussion: """
            The queue lives in a state directory (--state; default $XDG_STATE_HOME/downloadkit, else \
            ~/.local/state/downloadkit) as tasks.sqlite; partial data lives beside each destination as \
            NAME.dkpart and NAME.dkresume. `add` only records tasks; `run` downloads them. After Ctrl-C, \
            SIGTERM, SIGKILL or a crash, `queue run` again continues every unfinished task from the bytes \
            already on disk.

            One process uses a state directory at a time: while `queue run` works on it, the other queue \
            commands refuse (stop the run with Ctrl-C, which checkpoints, or let it finish).

            In `downloadkit-fleet` (built from Fleet/; downloadkit has no PostgreSQL client), with --store \
            postgres://USER@HOST:PORT/DB the queue lives in PostgreSQL instead and `add`, `list`, `run`, \
            `pause`, `resume` and `watch` work on it from any number of hosts at once: each `queue run` is a \
            worker of one fleet that claims tasks under leases (docs/FLEET.md).
            """,
        subcommands: [
            QueueAddCommand.self, QueueRunCommand.self, QueueListCommand.self, QueuePauseCommand.self,
            QueueResumeCommand.self, QueueRemoveCommand.self, QueueWatchCommand.self,
        ]
    )

    @Option(name: .customLong("state"), help: "The queue's state directory (default: $XDG_STATE_HOME/downloadkit or ~/.local/state/downloadkit).")
    var state: String?

    @Option(name: .customLong("store"), help: "downloadkit-fleet only: a PostgreSQL queue shared by several hosts, postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (add, list, run, pause, resume, watch; docs/FLEET.md).")
    var store: String?

    /// The fleet queue and the store `--store` names, or nil for the SQLite queue. Refused, naming
    /// `downloadkit-fleet`, in an executable without a fleet queue (``FleetQueues``).
    func fleetStore() throws -> (queue: any FleetQueue, store: String)? {
        guard let store else { return nil }
        guard let queue = FleetQueues.current else { throw ValidationError(FleetQueues.missing) }
        try queue.validate(store)
        return (queue, store)
    }

    /// Refuses `--store` for a command the PostgreSQL queue does not offer.
    func refusingFleetStore(_ command: String) throws {
        if store != nil {
            guard FleetQueues.current != nil else { throw ValidationError(FleetQueues.missing) }
            throw ValidationError("queue \(command) works on the SQLite queue only; with --store use add, list, run, pause and resume")
        }
    }

    /// The state directory to use, as an absolute path.
    var stateDirectory: String { Self.defaultStateDirectory(state) }

    /// `state` as an absolute path, or the default state directory.
    static func defaultStateDirectory(_ state: String?) -> String {
        if let state { return QueuePaths.absolute(state) }
        let environment = ProcessInfo.processInfo.environment
        if let xdg = environment["XDG_STATE_HOME"], xdg.hasPrefix("/") { return xdg + "/downloadkit" }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return home + "/.local/state/downloadkit"
    }
}

// MARK: - add

struct QueueAddCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Add URLs to the queue; prints each task's id.",
        discussion: """
            A URL (or --file-id) that is already in the queue is not added again: its existing id is \
            printed (and a note says so). Relative -o/-d paths are taken relative to the current directory \
            now. Without -o or -d files go to the current directory, named like `get` names them.
            """
    )

    @ParentCommand var queue: QueueCommand

    @Argument(help: "The URLs to add (http or https).")
    var urls: [String] = []

    @Option(name: .customShort("o"), help: "Destination file (a single URL only).")
    var output: String?

    @Option(name: .customShort("d"), help: "Destination directory (default: the current directory).")
    var directory: String?

    @Option(name: .customLong("file-id"), help: "Your id for the file (a single URL only): de-duplicates, and names the file in the directory (plus the URL's extension).")
    var fileID: String?

    @Option(name: .customLong("priority"), parsing: .unconditional, help: "Higher runs first (default 0; e.g. -10 low, 10 high).")
    var priority: Int = 0

    @Option(name: .customLong("group"), help: "A group name, shown by `list`.")
    var group: String?

    @Option(name: .customLong("checksum"), help: "ALGO=HEX (sha256, sha384, sha512, sha1, md5), checked before the final rename (a single URL only).")
    var checksum: String?

    mutating func validate() throws {
        if urls.isEmpty { throw ValidationError("give at least one URL") }
        if output != nil && directory != nil { throw ValidationError("-o and -d cannot be used together") }
        if urls.count > 1 {
            if output != nil { throw ValidationError("-o FILE takes a single URL; use -d DIR for several") }
            if fileID != nil { throw ValidationError("--file-id takes a single URL") }
            if checksum != nil { throw ValidationError("--checksum takes a single URL") }
        }
        if let fileID, fileID.isEmpty { throw ValidationError("--file-id must not be empty") }
        if let checksum, Checksum(parsing: checksum) == nil {
            throw ValidationError("--checksum must be ALGO=HEX with ALGO sha256, sha384, sha512, sha1 or md5 and a digest of the right length")
        }
    }

    func run() async throws {
        let naming: FileNamingRule = fileID.map { .fileID($0) } ?? .fromResponse
        let destination: DownloadDestination =
            output.map { .file(QueuePaths.absolute($0)) }
            ?? .directory(QueuePaths.absolute(directory ?? "."), naming: naming)
        let checksum = self.checksum.flatMap(Checksum.init(parsing:))
        let requests = urls.map { url in
            DownloadManager.TaskRequest(
                url: url, fileID: fileID, destination: destination, priority: DownloadPriority(rawValue: priority),
                checksum: checksum, group: group)
        }
        if let (fleet, store) = try queue.fleetStore() {
            for id in try await fleet.add(store, requests) { print(id) }
            return
        }
        let session = try await QueueSession.open(queue.stateDirectory)
        let ids: [String]
        do {
            let before = Set(await session.manager.allTasks().map(\.id))
            ids = try await session.manager.enqueue(requests)
            for (url, id) in zip(urls, ids) where before.contains(id) {
                let state = await session.manager.task(id)?.state.rawValue ?? "unknown"
                QueueOutput.error("note: \(TaskURLRedaction.listing(url)) is already in the queue as \(id) (\(state))")
            }
        } catch let error as DownloadManagerError where error.code == .invalidURL {
            await session.close()
            throw ValidationError(error.detail)
        } catch {
            await session.close()
            throw QueueSession.failure(error)
        }
        await session.close()
        for id in ids { print(id) }
    }
}

// MARK: - list

struct QueueListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List the queue's tasks: id, state, bytes/total, priority, group, URL, destination."
    )

    @ParentCommand var queue: QueueCommand

    @Flag(name: .long, help: "Print a JSON array for programs.")
    var json = false

    func run() async throws {
        if let (fleet, store) = try queue.fleetStore() {
            try await fleet.list(store, json: json)
            return
        }
        let session = try await QueueSession.open(queue.stateDirectory)
        let tasks = await session.manager.allTasks()
        await session.close()
        if json {
            let objects = tasks.map(QueueListing.jsonObject)
            let data = try JSONSerialization.data(withJSONObject: objects, options: [.sortedKeys, .prettyPrinted])
            FileHandle.standardOutput.write(data + Data("\n".utf8))
            return
        }
        guard !tasks.isEmpty else { return }
        var rows = [["ID", "STATE", "BYTES", "PRIORITY", "GROUP", "URL", "DESTINATION"]]
        for task in tasks {
            rows.append([
                task.id, task.state.rawValue, QueueListing.bytes(task), String(task.priority.rawValue), task.group ?? "-",
                task.listingURL, QueueListing.destination(task),
            ])
        }
        // Pad every column but the last.
        let widths = (0..<rows[0].count - 1).map { column in rows.map { $0[column].count }.max() ?? 0 }
        var text = ""
        for (index, row) in rows.enumerated() {
            var line = ""
            for (column, cell) in row.enumerated() {
                line += column < widths.count ? cell.padding(toLength: widths[column] + 2, withPad: " ", startingAt: 0) : cell
            }
            text += line + "\n"
            if index > 0, let error = tasks[index - 1].error {
                text += "    (\(QueueListing.errorLabel(error))) \(error.message)\n"
            }
        }
        FileHandle.standardOutput.write(Data(text.utf8))
    }

}

/// How `queue list` shows a task (the table's cells and the JSON object); `downloadkit-fleet` lists with the same.
public enum QueueListing {
    /// `received/total (percent)` as `list` shows it.
    public static func bytes(_ task: ManagedTask) -> String {
        guard let total = task.totalBytes else { return ProgressRenderer.bytes(task.bytesReceived) + "/?" }
        let percent = task.fraction.map { " (\(Int(($0 * 100).rounded(.down)))%)" } ?? ""
        return ProgressRenderer.bytes(task.bytesReceived) + "/" + ProgressRenderer.bytes(total) + percent
    }

    /// The file the task writes, or its directory with a trailing `/` before the name is known.
    public static func destination(_ task: ManagedTask) -> String {
        if let path = task.path { return path }
        switch task.destination {
        case .file(let path): return path
        case .directory(let directory, _): return directory + "/"
        }
    }

    /// The label `list` prints before a failed task's message: the code, with the HTTP status when there is one
    /// (`httpStatus 404`).
    public static func errorLabel(_ error: ManagedTaskError) -> String {
        error.httpStatus.map { "\(error.code.name) \($0)" } ?? error.code.name
    }

    /// A task's error as `list --json` prints it: the typed fields, the exit status `run` gives that error
    /// (docs: EXIT STATUS), and the message.
    public static func errorObject(_ error: ManagedTaskError) -> [String: Any] {
        var object: [String: Any] = [
            "code": error.code.name, "category": error.category.rawValue, "transient": error.isTransient,
            "exitStatus": Int(Exit.status(for: error)), "message": error.message,
        ]
        if let status = error.httpStatus { object["httpStatus"] = status }
        if let cause = error.cause {
            var fields: [String: Any] = ["layer": cause.layer.rawValue]
            if let code = cause.code { fields["code"] = code }
            if let errorNumber = cause.errorNumber { fields["errno"] = Int(errorNumber.rawValue) }
            if let operation = cause.operation { fields["operation"] = operation }
            object["cause"] = fields
        }
        return object
    }

    /// The task as `list --json` prints it.
    public static func jsonObject(_ task: ManagedTask) -> [String: Any] {
        var object: [String: Any] = [
            "id": task.id, "state": task.state.rawValue, "bytesReceived": task.bytesReceived,
            "priority": task.priority.rawValue, "url": task.listingURL, "destination": destination(task),
            "createdAt": task.createdAt.timeIntervalSince1970,
        ]
        if task.currentURL != task.originalURL { object["currentURL"] = task.listingCurrentURL }
        if let total = task.totalBytes { object["totalBytes"] = total }
        if let group = task.group { object["group"] = group }
        if let fileID = task.fileID { object["fileID"] = fileID }
        if let path = task.path { object["path"] = path }
        if let checksum = task.checksum { object["checksum"] = checksum.description }
        if let error = task.error { object["error"] = errorObject(error) }
        if let finished = task.finishedAt { object["finishedAt"] = finished.timeIntervalSince1970 }
        return object
    }
}

// MARK: - pause, resume, remove

/// The task ids (or `--all`) that pause, resume and remove take.
struct QueueTaskSelection: ParsableArguments {
    @Argument(help: "Task ids (as `add` and `list` print them; a unique prefix is enough).")
    var ids: [String] = []

    @Flag(name: .customLong("all"), help: "Every task in the queue.")
    var all = false

    func validate() throws {
        if ids.isEmpty && !all { throw ValidationError("give task ids or --all") }
        if !ids.isEmpty && all { throw ValidationError("give task ids or --all, not both") }
    }

    /// The ids and `--all` as a value (what the fleet queue takes).
    var selection: TaskSelection { TaskSelection(ids: ids, all: all) }

    /// The full ids selected (all must resolve, else nothing changes).
    func resolve(in manager: DownloadManager) async throws -> [String] {
        try selection.resolve(among: await manager.allTasks().map(\.id))
    }
}

/// Task ids as given on the command line (a unique prefix is enough), or every task.
public struct TaskSelection: Sendable {
    /// The ids or prefixes given.
    public let ids: [String]
    /// `--all`: every task.
    public let all: Bool

    /// The full ids selected among `known` (all must resolve, else nothing changes): an id or prefix that
    /// matches no task, or several, is an `error:` line and exit status 1.
    public func resolve(among known: [String]) throws -> [String] {
        if all { return known }
        var resolved: [String] = []
        for given in ids {
            let id = given.lowercased()
            if known.contains(id) {
                resolved.append(id)
                continue
            }
            let matches = known.filter { $0.hasPrefix(id) }
            guard !id.isEmpty, matches.count == 1, let match = matches.first else {
                QueueOutput.error(
                    matches.count > 1 ? "error: \(given) matches \(matches.count) tasks; give more of the id"
                        : "error: no task \(given) in the queue")
                throw ExitCode(Exit.failure)
            }
            resolved.append(match)
        }
        return resolved
    }
}

struct QueuePauseCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pause",
        abstract: "Pause tasks: `run` leaves them alone until `resume` (or run --start-paused-tasks). Bytes are kept."
    )

    @ParentCommand var queue: QueueCommand
    @OptionGroup var selection: QueueTaskSelection

    func run() async throws {
        if let (fleet, store) = try queue.fleetStore() {
            try await fleet.change(store, selection.selection, pausing: true)
            return
        }
        try await QueueSession.change(queue.stateDirectory, selection) { manager, ids in
            for id in ids { try await manager.pause(taskID: id) }
        }
    }
}

struct QueueResumeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume",
        abstract: "Put paused, failed or cancelled tasks back in the waiting line (at its end) for the next `run`."
    )

    @ParentCommand var queue: QueueCommand
    @OptionGroup var selection: QueueTaskSelection

    func run() async throws {
        if let (fleet, store) = try queue.fleetStore() {
            try await fleet.change(store, selection.selection, pausing: false)
            return
        }
        try await QueueSession.change(queue.stateDirectory, selection) { manager, ids in
            for id in ids { try await manager.resume(taskID: id) }
        }
    }
}

struct QueueRemoveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove",
        abstract: "Remove tasks from the queue and delete their partial data (finished files stay unless --delete-file)."
    )

    @ParentCommand var queue: QueueCommand
    @OptionGroup var selection: QueueTaskSelection

    @Flag(name: .customLong("delete-file"), help: "Also delete the finished file of completed tasks.")
    var deleteFile = false

    func run() async throws {
        try queue.refusingFleetStore("remove")
        let deleting = deleteFile
        try await QueueSession.change(queue.stateDirectory, selection) { manager, ids in
            for id in ids { try await manager.remove(taskID: id, deletingFile: deleting) }
        }
    }
}

// MARK: - Shared

/// Paths as the queue stores them.
public enum QueuePaths {
    /// `path` made absolute against the current directory (and standardised).
    public static func absolute(_ path: String) -> String {
        let full = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        return URL(fileURLWithPath: full).standardizedFileURL.path
    }
}

/// What the queue commands print.
public enum QueueOutput {
    /// Writes one line to stderr.
    public static func error(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}

/// `downloadkit queue --store postgres://… watch`: every task's state changes from the whole fleet, as
/// JSON lines, until Ctrl-C (LISTEN/NOTIFY, docs/FLEET.md).
struct QueueWatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "With --store: print every task's state changes from the whole fleet as JSON lines, until Ctrl-C.",
        discussion: """
            Each line is {"id", "state", "epoch", "worker"}: the task's state (waiting, running, paused, completed, \
            failed, cancelled, or removed) under the lease epoch of that worker. Progress is not reported. The \
            first line, {"listening": true}, says that every change committed from then on will be printed.
            """
    )

    @ParentCommand var queue: QueueCommand

    func run() async throws {
        guard let (fleet, store) = try queue.fleetStore() else {
            throw ValidationError("queue watch needs --store postgres://…")
        }
        try await fleet.watch(store)
    }
}
