import DownloadKit
import DownloadKitManager
import DownloadKitSession
import Foundation

/// Carries out a session request on its manager; front-end independent (the Unix-socket server uses
/// it, and another front end can). Subscriptions and acknowledgements are the front end's and the
/// host's business, not this type's.
public enum SessionService {
    /// Runs `request` (enqueue, pause, resume, cancel, remove, list, refreshURL) and returns its reply.
    public static func perform(_ request: ClientRequest, id: Int, on host: SessionHost) async -> ServerMessage {
        do {
            switch request {
            case .enqueue(let requests):
                let ids = try await host.manager.enqueue(try requests.map(taskRequest))
                return .ok(id: id, taskIDs: ids, tasks: [], position: host.position)
            case .pause(let ids):
                try await each(ids, host) { try await host.manager.pause(taskID: $0) }
            case .resume(let ids):
                try await each(ids, host) { try await host.manager.resume(taskID: $0) }
            case .cancel(let ids):
                try await each(ids, host) { try await host.manager.cancel(taskID: $0) }
            case .remove(let ids, let deletingFiles):
                try await each(ids, host) { try await host.manager.remove(taskID: $0, deletingFile: deletingFiles) }
            case .refreshURL(let task, let url):
                try await host.manager.refreshURL(taskID: task, newURL: url)
            case .list:
                let tasks = await host.manager.allTasks()
                // Every transition the snapshot shows was handed to the host's queue before it was taken.
                await host.settle()
                return .ok(id: id, taskIDs: [], tasks: tasks.map(info), position: host.position)
            case .hello, .subscribe, .acknowledge:
                return .error(id: id, SessionError(.malformedMessage, "not a manager request"))
            }
            return .ok(id: id, taskIDs: [], tasks: [], position: host.position)
        } catch let error as SessionError {
            return .error(id: id, error)
        } catch let error as DownloadManagerError {
            return .error(id: id, sessionError(error))
        } catch {
            return .error(id: id, SessionError(.storage, "\(error)"))
        }
    }

    /// Checks every id first, so a request naming an unknown task changes nothing.
    private static func each(
        _ ids: [String], _ host: SessionHost, _ body: (String) async throws -> Void
    ) async throws {
        for id in ids where await host.manager.task(id) == nil {
            throw SessionError(.unknownTask, "no task \(id) in session \(host.identifier)")
        }
        for id in ids { try await body(id) }
    }

    /// The manager's request for a wire request.
    /// - Throws: ``SessionError`` `malformedMessage` for relative paths, both `file` and `directory`, a
    ///   bad checksum, or a non-positive connection count or rate.
    static func taskRequest(_ request: SessionTaskRequest) throws(SessionError) -> DownloadManager.TaskRequest {
        let destination: DownloadDestination?
        switch (request.file, request.directory) {
        case (let file?, nil):
            guard file.hasPrefix("/") else { throw SessionError(.malformedMessage, "`file` must be an absolute path: \(file)") }
            destination = .file(file)
        case (nil, let directory?):
            guard directory.hasPrefix("/") else {
                throw SessionError(.malformedMessage, "`directory` must be an absolute path: \(directory)")
            }
            destination = .directory(directory, naming: request.fileID.map { .fileID($0) } ?? .fromResponse)
        case (nil, nil):
            destination = nil
        case (_?, _?):
            throw SessionError(.malformedMessage, "give `file` or `directory`, not both")
        }
        var checksum: Checksum?
        if let text = request.checksum {
            guard let parsed = Checksum(parsing: text) else {
                throw SessionError(.malformedMessage, "`checksum` must be ALGO=HEX (sha256, sha1, md5): \(text.prefix(200))")
            }
            checksum = parsed
        }
        if let connections = request.connections {
            guard connections >= 1, connections <= 64 else {
                throw SessionError(.malformedMessage, "`connections` must be 1…64")
            }
        }
        if let rate = request.rateLimit, rate < 1 { throw SessionError(.malformedMessage, "`rateLimit` must be positive") }
        return DownloadManager.TaskRequest(
            url: request.url, fileID: request.fileID, destination: destination,
            priority: DownloadPriority(rawValue: request.priority ?? 0), checksum: checksum, headers: request.headers ?? [:],
            group: request.group, rateLimit: request.rateLimit, connections: request.connections)
    }

    /// The wire snapshot of a task.
    static func info(_ task: ManagedTask) -> SessionTaskInfo {
        SessionTaskInfo(
            id: task.id, state: task.state.rawValue, url: task.listingURL, currentURL: task.listingCurrentURL, path: task.path,
            bytesReceived: task.bytesReceived, totalBytes: task.totalBytes, priority: task.priority.rawValue,
            group: task.group, errorCode: task.error?.code.name, errorDetail: task.error?.message,
            error: task.error.map(wireError))
    }

    /// A task's error as the session protocol carries it: every typed field of ``ManagedTaskError``.
    static func wireError(_ error: ManagedTaskError) -> SessionTaskError {
        SessionTaskError(
            code: error.code.name, category: error.category.rawValue, httpStatus: error.httpStatus,
            transient: error.isTransient,
            cause: error.cause.map {
                SessionTaskError.Cause(layer: $0.layer.rawValue, code: $0.code, errorNumber: $0.errorNumber, operation: $0.operation)
            },
            message: error.message)
    }

    static func sessionError(_ error: DownloadManagerError) -> SessionError {
        let code: SessionError.Code
        switch error.code {
        case .unknownTask: code = .unknownTask
        case .invalidURL: code = .invalidURL
        case .invalidState: code = .invalidState
        case .closed: code = .shuttingDown
        default: code = .storage
        }
        return SessionError(code, error.detail)
    }
}
