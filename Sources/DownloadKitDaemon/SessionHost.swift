import DownloadKit
import DownloadKitManager
import DownloadKitRuntime
import DownloadKitSession
import Foundation
import Logging

/// One session identifier in the daemon: its `DownloadManager` (state directory
/// `<state root>/<identifier>/`) and its durable ``EventLog``.
///
/// The manager's hooks run on the manager and only hand facts to this host's serial queue, which turns
/// them into events (``EventRules``), computes a finished file's SHA-256 when no checksum was requested,
/// writes them durably, and only then tells the front end (``onAppend``). Reads for delivery and
/// acknowledgements run on the same queue, so a reader never sees a half-written batch.
/// `@unchecked Sendable`: `log` is only touched on `queue`; the rest is immutable or a `LockedValue`.
public final class SessionHost: @unchecked Sendable {
    /// The session identifier.
    public let identifier: String
    /// `<state root>/<identifier>`.
    public let directory: String
    /// The session's manager (shared by every front end of the daemon).
    public let manager: DownloadManager

    private let log: EventLog
    private let queue = SerialThread()
    private let logger: Logger
    private let positions = LockedValue((lastSeq: Int64(0), acknowledged: Int64(0)))
    private let onAppend: @Sendable () -> Void

    /// Opens the manager and the log; restored tasks start only after the hooks are installed and the log
    /// was reconciled with the tasks, so no transition is missed or logged twice.
    /// - Parameter onAppend: Called (on the host's queue) after events were written.
    static func open(
        identifier: String, directory: String, configuration: DownloadManagerConfiguration, logger: Logger,
        onAppend: @escaping @Sendable () -> Void
    ) async throws -> SessionHost {
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        var configuration = configuration
        configuration.startsRestoredTasks = true
        // Nothing starts until the hooks are in place (the queue command's pattern, docs/MANAGER.md).
        let network = ManualNetworkMonitor(NetworkStatus(isReachable: false, isMetered: false))
        let manager = try await DownloadManager(
            stateDirectory: directory, configuration: configuration, networkMonitor: network)
        let log: EventLog
        do {
            log = try EventLog(path: directory + "/tasks.sqlite")
        } catch {
            await manager.close()
            throw SessionError(.storage, "cannot open the event log in \(directory): \(error)")
        }
        let host = SessionHost(
            identifier: identifier, directory: directory, manager: manager, log: log, logger: logger, onAppend: onAppend)
        await manager.setEventHandler { [weak host] event in host?.managerEvent(event) }
        await manager.setCompletionHandler { [weak host] completion in host?.completion(completion) }
        let tasks = await manager.allTasks()
        host.queue.async { host.apply(EventRules.reconcile(tasks: tasks, lastLogged: host.log.lastKind)) }
        network.update(NetworkStatus(isReachable: true, isMetered: false))
        return host
    }

    private init(
        identifier: String, directory: String, manager: DownloadManager, log: EventLog, logger: Logger,
        onAppend: @escaping @Sendable () -> Void
    ) {
        self.identifier = identifier
        self.directory = directory
        self.manager = manager
        self.log = log
        self.logger = logger
        self.onAppend = onAppend
        positions.withLock { $0 = (log.lastSeq, log.acknowledged) }
    }

    /// The highest sequence number written.
    public var lastSequence: Int64 { positions.withLock { $0.lastSeq } }
    /// Events up to this one are acknowledged.
    public var acknowledged: Int64 { positions.withLock { $0.acknowledged } }
    /// Both.
    public var position: SessionPosition {
        positions.withLock { SessionPosition(lastSequence: $0.lastSeq, acknowledged: $0.acknowledged) }
    }

    /// Returns once every fact handed to the queue so far is written.
    public func settle() async {
        await queue.settle()
    }

    // MARK: - Manager hooks (called on the manager: hand over, never block)

    private func managerEvent(_ event: ManagerEvent) {
        switch event {
        case .stateChanged(let id, let state):
            queue.async { self.apply([.state(id, state)]) }
        case .removed(let id):
            queue.async { self.apply([.removed(id)]) }
        case .progress, .finished, .failed, .allFinished, .networkChanged:
            break
        }
    }

    private func completion(_ completion: TaskCompletion) {
        switch completion.result {
        case .success(let result): queue.async { self.apply([.finished(completion.task, result)]) }
        case .failure: queue.async { self.apply([.failed(completion.task)]) }
        }
    }

    // MARK: - The queue

    /// Turns facts into events and writes them; on a storage failure the facts are logged as lost
    /// (the next open reconciles the terminal ones from the manager's rows).
    private func apply(_ facts: [TaskFact]) {
        var written: [SessionEvent] = []
        for fact in facts {
            guard let kind = EventRules.kind(for: fact, last: log.lastKind[fact.taskID]) else { continue }
            let event = makeEvent(kind, fact)
            do {
                written += try log.append([event])
            } catch {
                logger.error("session \(identifier): cannot write the \(kind) event of task \(fact.taskID): \(error)")
            }
        }
        guard !written.isEmpty else { return }
        positions.withLock { $0.lastSeq = log.lastSeq }
        onAppend()
    }

    private func makeEvent(_ kind: SessionEventKind, _ fact: TaskFact) -> SessionEvent {
        var event = SessionEvent(seq: 0, kind: kind, task: fact.taskID, time: Date().timeIntervalSince1970)
        switch fact {
        case .finished(let task, let result):
            event.url = task.originalURL
            event.path = result?.path ?? task.path
            event.bytes = result?.bytes ?? task.totalBytes ?? task.bytesReceived
            if let checksum = task.checksum {
                event.checksum = "\(checksum.algorithm.rawValue)=\(result?.checksumHex ?? checksum.expectedHex)"
            } else if let path = event.path {
                event.checksum = Self.sha256(path).map { "sha256=\($0)" }
            }
        case .failed(let task):
            event.url = task.originalURL
            event.path = task.path
            event.errorCode = task.error?.code.name ?? "unknown"
            event.errorDetail = task.error?.message ?? ""
            event.error = task.error.map(SessionService.wireError)
        case .state, .removed:
            break
        }
        return event
    }

    /// The file's SHA-256 in hex, or nil when it cannot be read.
    static func sha256(_ path: String) -> String? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        let digest = DKDigest(.sha256)
        do {
            // `read(upToCount:)` returns nil (or empty data) at the end of the file.
            while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
                chunk.withUnsafeBytes { digest.update($0) }
            }
        } catch {
            return nil
        }
        return DKDigest.hex(digest.finalize())
    }

    /// Reads unacknowledged events after `after` (at most `limit`) on the queue and hands them to `deliver`.
    func fetch(after: Int64, limit: Int, _ deliver: @escaping @Sendable ([SessionEvent], Int64) -> Void) {
        queue.async {
            do {
                let batch = try self.log.events(after: after, limit: limit)
                if batch.skipped > 0 {
                    self.logger.warning("session \(self.identifier): skipped \(batch.skipped) events of an unknown kind")
                }
                deliver(batch.events, batch.through)
            } catch {
                self.logger.error("session \(self.identifier): cannot read events: \(error)")
                deliver([], after)
            }
        }
    }

    /// Marks events up to `seq` handled, durably.
    func acknowledge(upTo seq: Int64) async throws {
        try await queue.run {
            try self.log.acknowledge(upTo: seq)
            self.positions.withLock { $0.acknowledged = self.log.acknowledged }
        }
    }

    /// Checkpoints every transfer (the manager's `close`), then waits for the events already handed over.
    func close() async {
        await manager.close()
        await settle()
    }
}
