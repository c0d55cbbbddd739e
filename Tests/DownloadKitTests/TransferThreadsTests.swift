import Foundation
import Synchronization
import Testing
import TestThreads

@testable import DownloadKit

/// The transfer thread pool: a job never waits for a thread (every transfer blocks its thread for its
/// whole life), threads are reused, and parked ones exit after their idle time.
@Suite("Transfer threads")
struct TransferThreadsTests {
    /// The kernel's id of the calling thread (`/proc/thread-self` links to `<pid>/task/<tid>`).
    static func threadID() -> String { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")) ?? "" }

    @Test func jobsThatBlockAllRunAtOnce() async throws {
        let pool = TransferThreads(idleSeconds: 5, maxParked: 4)
        // Park a few threads first, so later jobs mix parked threads and new ones.
        for _ in 0..<3 {
            let done = DispatchSemaphore(value: 0)
            pool.run(name: "dk-test") { done.signal() }
            done.wait()
        }
        let count = 40
        let started = Atomic<Int>(0)
        let release = DispatchSemaphore(value: 0)
        let finished = DispatchGroup()
        for _ in 0..<count {
            finished.enter()
            pool.run(name: "dk-test") {
                started.add(1, ordering: .relaxed)
                release.wait()  // holds its thread, as a transfer does
                finished.leave()
            }
        }
        let deadline = Date(timeIntervalSinceNow: 20)
        while started.load(ordering: .relaxed) < count && Date() < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(started.load(ordering: .relaxed) == count, "a job waited for another to end")
        for _ in 0..<count { release.signal() }
        #expect(finished.wait(timeout: .now() + 20) == .success)
        #expect(pool.parkedCount <= 4)
    }

    /// Runs a job named by each of `names` on `pool`, one after the other, each once the thread of the one before
    /// has parked again. Returns the kernel's id and name (comm) of the thread each job ran on.
    static func runOneAfterAnother(_ pool: TransferThreads, _ names: [String]) async throws -> [(id: String, comm: String)] {
        let seen = Mutex<[(id: String, comm: String)]>([])
        for name in names {
            let done = DispatchSemaphore(value: 0)
            pool.run(name: name) {
                let comm = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
                seen.withLock { $0.append((Self.threadID(), comm.trimmingCharacters(in: .whitespacesAndNewlines))) }
                done.signal()
            }
            done.wait()
            // The job signalled from inside its body: wait until its thread has parked again.
            let deadline = Date(timeIntervalSinceNow: 10)
            while pool.parkedCount == 0 && Date() < deadline { try await Task.sleep(for: .milliseconds(1)) }
        }
        return seen.withLock { $0 }
    }

    @Test func aFinishedThreadRunsTheNextJobAndRenamesItself() async throws {
        // Idle time far beyond the test's: a loaded machine must not let the parked thread exit between jobs.
        let pool = TransferThreads(idleSeconds: 600, maxParked: 4)
        let seen = try await Self.runOneAfterAnother(pool, (0..<10).map { "dk-job-\($0)" })
        #expect(Set(seen.map(\.id)).count == 1, "ten jobs one after another took \(Set(seen.map(\.id)).count) threads")
        #expect(seen.map(\.comm) == (0..<10).map { "dk-job-\($0)" })
    }

    /// The kernel keeps 15 bytes of a thread's name, and glibc refuses a longer one (ERANGE) instead of cutting it:
    /// the thread then kept the name of the job it ran before, so ps and /proc showed the wrong transfer.
    @Test func aLongNameIsCutToFifteenBytesNotLeftAtThePreviousJob() async throws {
        let pool = TransferThreads(idleSeconds: 600, maxParked: 4)
        let seen = try await Self.runOneAfterAnother(pool, ["dk-short", "dk-segment-12345678"])
        #expect(seen.map(\.comm) == ["dk-short", "dk-segment-1234"])
    }

    @Test(.offPool) func parkedThreadsExitAfterTheirIdleTime() throws {
        // The idle time must outlast any delay of the poll below, or the threads park and exit between two
        // looks and the test never sees them parked. The poll blocks its own thread (usleep) rather than
        // awaiting Task.sleep: under TSan on 2 CPUs the cooperative pool, busy with the other suites, once
        // resumed a 5 ms sleep more than 2 s late (an idle time of 2 s then failed; 0.2 s had before).
        let pool = TransferThreads(idleSeconds: 5, maxParked: 8)
        let done = DispatchGroup()
        for _ in 0..<3 {
            done.enter()
            pool.run(name: "dk-test") { done.leave() }
        }
        #expect(done.wait(timeout: .now() + 10) == .success)
        let parkedBy = Date(timeIntervalSinceNow: 10)
        while pool.parkedCount < 1 && Date() < parkedBy { usleep(5_000) }
        #expect(pool.parkedCount >= 1)
        let exitedBy = Date(timeIntervalSinceNow: 20)
        while pool.parkedCount > 0 && Date() < exitedBy { usleep(20_000) }
        #expect(pool.parkedCount == 0)
    }

    /// What a job captured is released when it ends, not when its thread exits: a segment worker's
    /// captured file handle held the partial's lock on a parked thread and the next run of the same
    /// download found it "in use by another download".
    @Test func aJobsCapturesAreReleasedWhenItEnds() async throws {
        final class Capture: Sendable {}
        let pool = TransferThreads(idleSeconds: 600, maxParked: 4)
        for _ in 0..<2 {  // a new thread's first job, then a parked thread's
            weak var released: Capture?
            let done = DispatchSemaphore(value: 0)
            do {
                let capture = Capture()
                released = capture
                pool.run(name: "dk-test") {
                    withExtendedLifetime(capture) {}
                    done.signal()
                }
            }
            done.wait()
            let deadline = Date(timeIntervalSinceNow: 10)
            while (pool.parkedCount == 0 || released != nil) && Date() < deadline { try await Task.sleep(for: .milliseconds(2)) }
            #expect(pool.parkedCount == 1)
            #expect(released == nil, "the parked thread still holds what its job captured")
        }
    }
}
