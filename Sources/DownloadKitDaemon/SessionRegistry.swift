import DownloadKit
import DownloadKitManager
import DownloadKitSession
import Foundation
import Logging

/// The daemon's sessions by identifier, opened on first use (or at startup when their directory
/// exists), each a ``SessionHost``. Front ends (the Unix-socket ``ControlServer``, later an aria2
/// JSON-RPC listener) share one registry.
public actor SessionRegistry {
    /// The directory holding one `<identifier>/` directory per session.
    public nonisolated let stateRoot: String
    /// The configuration every session's manager starts with.
    public nonisolated let configuration: DownloadManagerConfiguration
    private let logger: Logger
    private let onAppend: @Sendable () -> Void
    private var hosts: [String: SessionHost] = [:]
    private var opening: [String: Task<SessionHost, any Error>] = [:]
    private var isClosed = false

    /// - Parameter onAppend: Called whenever a session wrote new events (wakes the front ends).
    public init(
        stateRoot: String, configuration: DownloadManagerConfiguration, logger: Logger,
        onAppend: @escaping @Sendable () -> Void
    ) {
        self.stateRoot = stateRoot
        self.configuration = configuration
        self.logger = logger
        self.onAppend = onAppend
    }

    /// The session's host, opening it (and its directory) if needed.
    /// - Throws: ``SessionError``: `invalidIdentifier`, `storage`, `shuttingDown`.
    public func host(_ identifier: String) async throws(SessionError) -> SessionHost {
        guard SessionProtocol.isValidIdentifier(identifier) else {
            throw SessionError(.invalidIdentifier, "invalid session identifier: use 1–128 of A-Z a-z 0-9 . _ -")
        }
        if isClosed { throw SessionError(.shuttingDown, "the daemon is shutting down") }
        if let host = hosts[identifier] { return host }
        let task: Task<SessionHost, any Error>
        if let existing = opening[identifier] {
            task = existing
        } else {
            let directory = stateRoot + "/" + identifier
            let (configuration, logger, onAppend) = (self.configuration, self.logger, self.onAppend)
            task = Task {
                try await SessionHost.open(
                    identifier: identifier, directory: directory, configuration: configuration, logger: logger,
                    onAppend: onAppend)
            }
            opening[identifier] = task
        }
        do {
            let host = try await task.value
            opening[identifier] = nil
            if hosts[identifier] == nil {
                hosts[identifier] = host
                logger.info("session \(identifier) open in \(host.directory)")
            }
            return hosts[identifier] ?? host
        } catch let error as SessionError {
            opening[identifier] = nil
            throw error
        } catch {
            opening[identifier] = nil
            throw SessionError(.storage, "cannot open session \(identifier): \(error)")
        }
    }

    /// Opens every session that has a directory with a task database, so their unfinished transfers
    /// resume without waiting for a client. Failures are logged, not fatal.
    public func openExisting() async {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: stateRoot)) ?? []
        for name in names.sorted() where SessionProtocol.isValidIdentifier(name) {
            guard FileManager.default.fileExists(atPath: stateRoot + "/" + name + "/tasks.sqlite") else { continue }
            do {
                _ = try await host(name)
            } catch {
                logger.error("cannot open session \(name): \(error)")
            }
        }
    }

    /// Checkpoints every session's transfers and refuses new sessions.
    public func closeAll() async {
        isClosed = true
        var all = hosts
        for (identifier, task) in opening {
            if let host = try? await task.value { all[identifier] = host }
        }
        for host in all.values { await host.close() }
    }
}
