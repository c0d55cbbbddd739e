import ArgumentParser
import DownloadKit
import DownloadKitManager
import Logging
import HTTPClient

/// The PostgreSQL queue behind `queue --store postgres://…` (docs/FLEET.md), plugged into these commands by
/// the executable that has it.
///
/// `downloadkit` has none: the PostgreSQL client (postgres-nio) brings a second TLS stack, BoringSSL, that a
/// tool for downloads should not carry. `downloadkit-fleet`, built from the package in `Fleet/`,
/// is the same commands with its ``FleetQueue`` installed through ``FleetQueues/install(_:)`` before they
/// parse; `downloadkit queue --store …` says where the fleet queue is. Not an API: this library exists so
/// that the two executables share one set of commands.
public protocol FleetQueue: Sendable {
    /// Throws a `ValidationError` naming the expected form when `store` is not a store this queue opens.
    func validate(_ store: String) throws
    /// `queue add --store`: records the tasks, returns their identifiers (one per request, in order).
    func add(_ store: String, _ requests: [DownloadManager.TaskRequest]) async throws -> [String]
    /// `queue list --store`: prints the fleet's tasks (a table, or JSON).
    func list(_ store: String, json: Bool) async throws
    /// `queue pause|resume --store`.
    func change(_ store: String, _ selection: TaskSelection, pausing: Bool) async throws
    /// `queue run --store`: this process as one worker of the fleet.
    func run(_ store: String, _ run: FleetRun) async throws
    /// `queue watch --store`: the fleet's state changes as JSON lines until Ctrl-C.
    func watch(_ store: String) async throws
}

/// Where an executable installs its ``FleetQueue`` (at most one, before the commands run).
public enum FleetQueues {
    private static let installed = LockedValue<(any FleetQueue)?>(nil)

    /// Installs the fleet queue `queue --store` uses in this process.
    public static func install(_ queue: any FleetQueue) {
        installed.withLock { $0 = queue }
    }

    /// The installed fleet queue, if any.
    static var current: (any FleetQueue)? { installed.withLock { $0 } }

    /// Why `--store` does nothing in an executable without a fleet queue.
    static let missing = """
        --store names the PostgreSQL fleet queue, which is in `downloadkit-fleet` (built from Fleet/, \
        docs/FLEET.md), not in downloadkit: this downloadkit has no PostgreSQL client (docs/PACKAGES.md)
        """
}

/// What `queue run --store` asks of the fleet's worker: its options, read and checked by the command.
public struct FleetRun: Sendable {
    /// `--worker-id` (nil: HOST-PID).
    public var workerID: String?
    /// `--max-concurrent`: tasks at a time in this worker.
    public var maxConcurrent: Int
    /// `--lease`, `--poll`: seconds.
    public var leaseSeconds: Double
    /// Seconds between looks for work when a slot is free.
    public var pollSeconds: Double
    /// `--fleet-max-concurrent` (0 removes the limit; nil leaves it).
    public var fleetMaxConcurrent: Int?
    /// `--limit-rate` in bytes per second.
    public var globalRateLimit: Int?
    /// `--worker-header`.
    public var workerHeader: Bool
    /// No progress display (`-q`, or `--progress none`).
    public var quiet: Bool
    /// `--on-complete`.
    public var onComplete: String?
    /// The transfers' configuration (client, credentials, proxies, logger).
    public var download: DownloadConfiguration
    /// Where the worker logs (a no-op logger without `-v` or `--log-file`).
    public var logger: Logger
    /// Binds the `--user` and netrc credentials to these URLs in the client's authenticator (each task's as
    /// it is claimed).
    public var bindCredentials: @Sendable (Authenticator, [String]) throws -> Void
}
