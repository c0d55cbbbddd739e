import DownloadKit
import Foundation
import Logging
import HTTPClient

/// Where a managed task is in its life.
public enum ManagedTaskState: String, Sendable, Hashable, Codable {
    /// In the line, waiting for a free slot (or for the network to allow it).
    case waiting
    /// Its transfer runs.
    case running
    /// Stopped by the user (or restored paused after a restart); its bytes are kept.
    case paused
    /// The file is at its destination.
    case completed
    /// Stopped by an error (kept in ``ManagedTask/error``); its bytes are kept when resumable.
    case failed
    /// Stopped by the user with its partial data deleted; resuming starts from byte 0.
    case cancelled
}

/// A task's priority: higher runs first. Any integer works; three names are provided.
public struct DownloadPriority: RawRepresentable, Sendable, Hashable, Comparable, Codable {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public static let low = DownloadPriority(rawValue: -10)
    public static let normal = DownloadPriority(rawValue: 0)
    public static let high = DownloadPriority(rawValue: 10)
    public static func < (lhs: DownloadPriority, rhs: DownloadPriority) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// How a task's URL may appear outside the task store: the one rule of ``HTTPWire/HTTPURL/redacting(_:_:)``,
/// for modules that hold URLs as strings and do not import HTTPWire (the daemon, the session protocol).
public enum TaskURLRedaction {
    /// For listings (`queue list`, `session list`, session events, RPC `getUris`): the userinfo password
    /// replaced by `***`, the query kept so a front end can tell signed URLs apart.
    public static func listing(_ url: String) -> String { HTTPURL.redacting(url, .password) }
    /// For logs and error texts: the password, every query value and the fragment replaced by `***`.
    public static func log(_ url: String) -> String { HTTPURL.redacting(url) }
}

/// A snapshot of one managed task (what the manager persists about it).
///
/// ``originalURL`` and ``currentURL`` keep the URL as given, userinfo included, because the task needs
/// it to download again after a restart; the task store is private to the user (the file 0600 in a 0700
/// directory). Everything that shows a task uses ``listingURL`` / ``listingCurrentURL``.
public struct ManagedTask: Sendable, Hashable, Identifiable {
    /// ``originalURL`` as listings may show it (``TaskURLRedaction/listing(_:)``: no password).
    public var listingURL: String { TaskURLRedaction.listing(originalURL) }
    /// ``currentURL`` as listings may show it (``TaskURLRedaction/listing(_:)``: no password).
    public var listingCurrentURL: String { TaskURLRedaction.listing(currentURL) }

    /// A stable UUID string, independent of the URL.
    public var id: String
    /// The URL it was enqueued with (its identity for de-duplication).
    public var originalURL: String
    /// The URL downloads use now (after ``DownloadManager/refreshURL(taskID:newURL:)``).
    public var currentURL: String
    /// The caller's file id (de-duplication key, and the file name under the `.fileID` naming rule).
    public var fileID: String?
    /// Where the file goes.
    public var destination: DownloadDestination
    /// The final path, once known (always for `.file` destinations; after completion for directories).
    public var path: String?
    public var state: ManagedTaskState
    /// Durable bytes received (updated every few seconds while running, and at every state change).
    public var bytesReceived: Int64
    public var totalBytes: Int64?
    public var priority: DownloadPriority
    /// The place in the waiting line (smaller is earlier); changes when the user resumes or moves it.
    public var queueOrder: Int64
    public var group: String?
    public var checksum: Checksum?
    public var headers: [String: String]
    /// Caller data kept with the task (title, cover image URL, …).
    public var metadata: [String: String]
    /// Whether the task may only run on an unmetered network.
    public var requiresUnmeteredNetwork: Bool
    /// This task's own limit in bytes per second, if any.
    public var rateLimit: Int?
    /// This task's range connections (1…64), overriding the configuration's `download.connections`; nil
    /// for the configuration's count.
    public var connections: Int?
    /// This task's connections to one source (1…64, ``DownloadConfiguration/connectionsPerSource``; aria2's
    /// `max-connection-per-server`), overriding the configuration's; nil for the configuration's.
    public var connectionsPerSource: Int?
    /// Other URLs of the same resource (``DownloadRequest/mirrors``): the transfer spreads its segments over
    /// the task's URL and these. Empty for a single-source task.
    public var mirrors: [String]
    /// The file's piece hashes (``DownloadRequest/pieceChecksums``, a Metalink `<pieces>`): each piece is
    /// verified as it completes and a bad one is fetched again from another source (docs/MIRRORS.md, "Piece
    /// checksums"). Fixed at enqueue: a store writes the table once, beside the task's row (never with every
    /// progress write), and reads it back with the task. Nil for none.
    public var pieceChecksums: PieceChecksums?
    /// The error the task stopped with (``ManagedTaskState/failed``).
    public var error: ManagedTaskError?
    public var createdAt: Date
    public var updatedAt: Date
    public var finishedAt: Date?

    /// `bytesReceived / totalBytes` when the total is known.
    public var fraction: Double? {
        guard let totalBytes, totalBytes > 0 else { return nil }
        return Double(bytesReceived) / Double(totalBytes)
    }

    /// A task as a store reads it back (every field given).
    public init(
        id: String, originalURL: String, currentURL: String, fileID: String?, destination: DownloadDestination,
        path: String?, state: ManagedTaskState, bytesReceived: Int64, totalBytes: Int64?, priority: DownloadPriority,
        queueOrder: Int64, group: String?, checksum: Checksum?, headers: [String: String], metadata: [String: String],
        requiresUnmeteredNetwork: Bool, rateLimit: Int?, error: ManagedTaskError?, createdAt: Date, updatedAt: Date,
        finishedAt: Date?, connections: Int? = nil, mirrors: [String] = [], connectionsPerSource: Int? = nil,
        pieceChecksums: PieceChecksums? = nil
    ) {
        self.id = id
        self.originalURL = originalURL
        self.currentURL = currentURL
        self.fileID = fileID
        self.destination = destination
        self.path = path
        self.state = state
        self.bytesReceived = bytesReceived
        self.totalBytes = totalBytes
        self.priority = priority
        self.queueOrder = queueOrder
        self.group = group
        self.checksum = checksum
        self.headers = headers
        self.metadata = metadata
        self.requiresUnmeteredNetwork = requiresUnmeteredNetwork
        self.rateLimit = rateLimit
        self.error = error
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.finishedAt = finishedAt
        self.connections = connections
        self.mirrors = mirrors
        self.connectionsPerSource = connectionsPerSource
        self.pieceChecksums = pieceChecksums
    }
}

/// Aggregate progress of a group of tasks.
public struct GroupProgress: Sendable, Hashable {
    public var taskCount: Int
    public var completedCount: Int
    public var bytesReceived: Int64
    /// The sum of the totals, when every task's total is known.
    public var totalBytes: Int64?
    /// How many tasks are in each state.
    public var states: [ManagedTaskState: Int]

    public var fraction: Double? {
        guard let totalBytes, totalBytes > 0 else { return nil }
        return Double(bytesReceived) / Double(totalBytes)
    }
}

/// What a ``DownloadManager`` reports.
public enum ManagerEvent: Sendable {
    /// A task changed state (seed 000's `kDownloadStatusChangedNoti`).
    case stateChanged(taskID: String, state: ManagedTaskState)
    /// Progress of a running task, at most every ``DownloadManagerConfiguration/progressEventInterval``.
    case progress(taskID: String, DownloadProgress)
    /// A task's file is complete at `path` (`kDownloadTaskFinishedNoti`).
    case finished(taskID: String, path: String)
    /// A task failed.
    case failed(taskID: String, DownloadError)
    /// Nothing runs or waits any more, after a task ended; paused and failed tasks do not count
    /// (`kDownloadAllTaskFinishedNoti`). Sent after the `.finished` of every task that ended before it.
    case allFinished
    /// A task was removed.
    case removed(taskID: String)
    /// The network status changed.
    case networkChanged(NetworkStatus)
}

/// How a task ended, for completion hooks.
public struct TaskCompletion: Sendable {
    public var task: ManagedTask
    /// The download's result when it completed, the error when it failed.
    public var result: Result<DownloadResult, DownloadError>
}

/// Settings of a ``DownloadManager``.
public struct DownloadManagerConfiguration: Sendable {
    /// Tasks running at once. Default 3 (YCDownloadSession's cap). Change it later with
    /// ``DownloadManager/setMaxConcurrent(_:)``.
    public var maxConcurrentDownloads: Int
    /// Whether tasks that were waiting or running when the previous manager stopped (or crashed) start on
    /// their own. Default false: like YCDownloadSession they come back paused and wait for the user.
    public var startsRestoredTasks: Bool
    /// Template for every task's download (retries, timeouts, checkpoints). Its `client` settings make
    /// the manager's one shared `DKHTTPClient` (connection reuse across tasks, `maxConnectionsPerOrigin`).
    public var download: DownloadConfiguration
    /// A limit for all tasks together, bytes per second; nil is unlimited.
    public var globalRateLimit: Int?
    /// Whether tasks may use a metered network at all (iOS `allowsCellularAccess`). Default true; tasks
    /// marked `requiresUnmeteredNetwork` never do.
    public var allowsMeteredNetwork: Bool
    /// Smallest spacing of progress events per task. Default 500 ms.
    public var progressEventInterval: Duration
    /// Bytes received are written to the store at most this often per task. Default 3 s.
    public var progressPersistInterval: Duration
    /// The directory for destinations left unspecified; default `<state directory>/Downloads`.
    public var defaultDownloadDirectory: String?
    /// Where the manager logs: the tasks restored at start (`debug`), a task store that cannot be written
    /// (`error`), and, through the shared client, connection decisions (`debug`). Each task's own
    /// download logs to `download.logger`. Default: a `Logger` labelled `DownloadKit.DownloadManager`
    /// on swift-log's global `LoggingSystem`.
    public var logger = Logger(label: "DownloadKit.DownloadManager")

    public init(
        maxConcurrentDownloads: Int = 3, startsRestoredTasks: Bool = false,
        download: DownloadConfiguration = DownloadConfiguration(), globalRateLimit: Int? = nil,
        allowsMeteredNetwork: Bool = true, progressEventInterval: Duration = .milliseconds(500), progressPersistInterval: Duration = .seconds(3),
        defaultDownloadDirectory: String? = nil
    ) {
        self.maxConcurrentDownloads = maxConcurrentDownloads
        self.startsRestoredTasks = startsRestoredTasks
        self.download = download
        self.globalRateLimit = globalRateLimit
        self.allowsMeteredNetwork = allowsMeteredNetwork
        self.progressEventInterval = progressEventInterval
        self.progressPersistInterval = progressPersistInterval
        self.defaultDownloadDirectory = defaultDownloadDirectory
    }
}

/// Why a manager operation was refused.
public struct DownloadManagerError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let name: String
        init(_ name: String) { self.name = name }
        public var description: String { name }
        /// No task has this id.
        public static let unknownTask = Code("unknownTask")
        /// The operation does not apply to the task's state (for example moving a running task).
        public static let invalidState = Code("invalidState")
        /// The URL cannot be parsed or is not http/https.
        public static let invalidURL = Code("invalidURL")
        /// A request's piece table cannot describe any file (``PieceChecksums/validate()``).
        public static let invalidPieceChecksums = Code("invalidPieceChecksums")
        /// The state directory or its database could not be opened or written.
        public static let storage = Code("storage")
        /// The manager was closed.
        public static let closed = Code("closed")
    }

    public var code: Code
    public var detail: String
    @_spi(DownloadKitInternal) public init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }
    public var description: String { detail }
}
