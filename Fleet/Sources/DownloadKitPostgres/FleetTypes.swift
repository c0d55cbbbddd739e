import DownloadKit
import DownloadKitManager
import Foundation

/// A task as the fleet's store holds it: the task and its lease.
public struct FleetTask: Sendable, Hashable {
    /// The task's row.
    public var task: ManagedTask
    /// The worker holding (or that last held) the task's lease.
    public var leaseOwner: String?
    /// The lease's epoch: 0 before the first claim, one more with every claim.
    public var leaseEpoch: Int64
    /// When the lease runs out (the server's clock), while the task runs.
    public var leaseUntil: Date?
    /// Whether the task runs under a lease that has not run out (by the server's clock when read).
    public var leaseIsLive: Bool
    /// Why the row cannot run as stored (a relative destination, a checksum that does not parse), or nil
    /// (``StoredTaskColumns/refusal``: the same rule as the SQLite store's).
    package var refusal: ManagedTaskError? = nil
}

/// A worker's hold on one task: the task as claimed and the epoch that fences every write of it.
public struct Lease: Sendable, Hashable {
    /// The task as it was claimed.
    public var task: ManagedTask
    /// The lease's epoch: the claim's number for this task (1 for the first); every write is fenced by it.
    public var epoch: Int64
    /// Why the claimed row cannot run (``FleetTask/refusal``): the worker records the task failed with it.
    package var refusal: ManagedTaskError?

    /// A lease on `task` under `epoch`.
    public init(task: ManagedTask, epoch: Int64) {
        self.init(task: task, epoch: epoch, refusal: nil)
    }

    package init(task: ManagedTask, epoch: Int64, refusal: ManagedTaskError?) {
        self.task = task
        self.epoch = epoch
        self.refusal = refusal
    }
}

/// How a worker gives a lease back (``PostgresTaskStore/finish(_:worker:as:)``).
public enum LeaseEnding: Sendable {
    /// The file is in place.
    case completed(DownloadResult)
    /// The download failed for good; `bytes` are on disk.
    case failed(DownloadError, bytes: Int64)
    /// The worker stopped: the task waits again, its bytes on disk, for any worker.
    case released(bytes: Int64, totalBytes: Int64?)
}

/// One lease in the store's history.
public struct LeaseRecord: Sendable, Hashable {
    /// The task leased.
    public var taskID: String
    /// The lease's epoch.
    public var epoch: Int64
    /// The worker it was granted to.
    public var worker: String
    /// When it was granted (the server's clock).
    public var acquiredAt: Date
    /// The last deadline the lease was renewed to (the server's clock).
    public var validUntil: Date
    /// When it was given back (completed, failed, released), or when the next claim found it run out.
    public var endedAt: Date?
    /// `completed`, `failed`, `released`, `expired` (another worker claimed it after it ran out), or nil
    /// while held.
    public var outcome: String?
}

/// A change of one task, from any worker of the fleet (``PostgresTaskStore/taskEvents()``).
public enum FleetTaskEvent: Sendable, Hashable {
    /// The subscription is in place: every change committed from now on is delivered.
    case listening
    /// The task is now in `state` (`removed` when its row was deleted) under the lease `epoch` of `worker`.
    case changed(taskID: String, state: String, epoch: Int64, worker: String?)

    init?(payload: String) {
        guard let object = try? JSONSerialization.jsonObject(with: Data(payload.utf8)) as? [String: Any],
            let id = object["id"] as? String, let state = object["state"] as? String
        else { return nil }
        let epoch = (object["epoch"] as? NSNumber)?.int64Value ?? 0
        self = .changed(taskID: id, state: state, epoch: epoch, worker: object["worker"] as? String)
    }
}
