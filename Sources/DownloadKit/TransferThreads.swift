import CDownloadKitSystem
import Foundation
import HTTPClient

/// The threads transfers run on: one per running transfer (docs/ARCHITECTURE.md, "Threads, not an event
/// loop"), reused. A transfer takes a parked thread when one is free and starts a new one otherwise; a
/// thread whose transfer ended parks for ``idleSeconds`` (at most ``maxParked`` park at once) and then
/// exits. Creating and ending a thread per transfer cost a dozen system calls and a fresh 1 MiB stack
/// mapping per file — a visible share of a small file's CPU (issue #18: 1,000 files of 64 KiB).
///
/// A running thread carries its transfer's name in the kernel (`ps -L`, `top -H`, /proc), `dk-idle` while
/// parked.
final class TransferThreads: Sendable {
    /// The process's pool: every ``Download`` and every segment worker.
    static let shared = TransferThreads(idleSeconds: 2, maxParked: 64)

    /// How long a thread waits for another transfer before it exits.
    let idleSeconds: Double
    /// At most this many threads wait at once; more exit as soon as their transfer ends.
    let maxParked: Int

    private struct Job {
        let name: String
        let body: @Sendable () -> Void
    }

    /// The queued jobs and how many threads are parked waiting for one.
    private struct Pool {
        var jobs: [Job] = []
        var parked = 0
    }

    private let pool = LockedValue(Pool())

    init(idleSeconds: Double, maxParked: Int) {
        self.idleSeconds = idleSeconds
        self.maxParked = maxParked
    }

    /// Runs `body` on a thread of its own named `name` (15 bytes at most reach the kernel).
    func run(name: String, _ body: @escaping @Sendable () -> Void) {
        let job = Job(name: name, body: body)
        // Every parked thread takes a queued job before it can exit (below), so a job queued while
        // more threads are parked than jobs are queued is always taken. One parked thread is woken (after
        // the unlock); a thread whose wait ends before that still takes the job: it looks at `jobs` before
        // it leaves (`work`).
        let queued = pool.withLockWakingOneWaiter { pool -> Bool in
            guard pool.parked > pool.jobs.count else { return false }
            pool.jobs.append(job)
            return true
        }
        if queued { return }
        // The thread's closure lives as long as the thread: it must not hold the job (a transfer's
        // captures — a segment worker's file handle and its lock — are released when the job ends).
        let handoff = Handoff(job)
        let thread = Thread { [self] in work(handoff) }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// The number of threads parked now (tests).
    var parkedCount: Int {
        pool.withLock { $0.parked }
    }

    /// A new thread's first job, taken once.
    private final class Handoff: @unchecked Sendable {
        private var job: Job?
        init(_ job: Job) { self.job = job }
        func take() -> Job? {
            defer { job = nil }
            return job
        }
    }

    private func work(_ handoff: Handoff) {
        var next = handoff.take()
        while next != nil {
            Self.execute(&next)
            _ = dk_set_current_thread_name("dk-idle")
            next = park()
        }
    }

    /// What a thread does when its job ended: waits up to ``idleSeconds`` for another (then returns it),
    /// or returns nil to exit (``maxParked`` are parked already, or none came).
    private func park() -> Job? {
        enum Parking {
            case exit
            case job(Job)
        }
        let deadline = Deadline.after(seconds: idleSeconds)
        var parkedHere = false
        let outcome = pool.wait(until: deadline) { pool -> Parking? in
            if !parkedHere {
                guard pool.parked < maxParked else { return .exit }
                pool.parked += 1
                parkedHere = true
            }
            guard !pool.jobs.isEmpty else { return nil }
            pool.parked -= 1
            return .job(pool.jobs.removeFirst())
        }
        switch outcome {
        case .job(let job): return job
        case .exit: return nil
        case nil:
            // The idle time passed: leave, taking a job queued meanwhile (it was queued for this thread).
            return pool.withLock { pool in
                pool.parked -= 1
                return pool.jobs.isEmpty ? nil : pool.jobs.removeFirst()
            }
        }
    }

    /// Runs the job and lets go of it before returning: nothing it captured outlives it on a parked thread.
    private static func execute(_ next: inout Job?) {
        guard let job = next else { return }
        next = nil
        _ = dk_set_current_thread_name(job.name)
        job.body()
    }
}
