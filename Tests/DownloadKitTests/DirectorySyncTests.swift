import Foundation
import Synchronization
import Testing
import TestThreads

@testable import DownloadKit

/// Group commit of directory syncs: every caller returns after a successful sync that began after it
/// called, or with the error of its own sync — and callers that arrive during a sync share the next one.
@Suite("Directory sync: group commit", .offPool)
struct DirectorySyncTests {
    @Test func ticketsThatArriveDuringASyncShareTheNextOne() {
        var state = GroupCommit()
        let first = state.arrive()
        #expect(state.next(for: first) == .lead(target: 1))
        let second = state.arrive()
        let third = state.arrive()
        // The running sync began before they arrived: it covers neither.
        #expect(state.next(for: second) == .wait)
        #expect(state.next(for: third) == .wait)
        state.finished(target: 1, succeeded: true)
        #expect(state.next(for: first) == .done)
        state.leave()
        #expect(state.next(for: second) == .lead(target: 3))
        #expect(state.next(for: third) == .wait)
        state.finished(target: 3, succeeded: true)
        #expect(state.next(for: third) == .done)
        #expect(state.next(for: second) == .done)
        state.leave()
        #expect(!state.isIdle)
        state.leave()
        #expect(state.isIdle)
    }

    @Test func aFailedSyncCoversNoOne() {
        var state = GroupCommit()
        let first = state.arrive()
        #expect(state.next(for: first) == .lead(target: 1))
        let second = state.arrive()
        state.finished(target: 1, succeeded: false)
        state.leave()  // the first caller throws its sync's error
        // The waiter was not covered by the failed sync: it runs its own.
        #expect(state.next(for: second) == .lead(target: 2))
        state.finished(target: 2, succeeded: true)
        #expect(state.next(for: second) == .done)
        state.leave()
        #expect(state.isIdle)
    }

    /// Sixteen threads sync one directory at once: each returns only after a sync that began after its
    /// call, and they share syncs (the first is held until the others have called).
    @Test func concurrentCallersShareSyncsAndEachIsCovered() {
        let sync = DirectorySync()
        let callers = 16
        let started = Atomic<Int>(0)  // syncs begun
        let finishedThrough = Atomic<Int>(0)  // the highest begun-index of a finished sync
        let calling = Atomic<Int>(0)
        let violations = Atomic<Int>(0)
        let group = DispatchGroup()
        for _ in 0..<callers {
            group.enter()
            Thread {
                calling.add(1, ordering: .sequentiallyConsistent)
                let before = started.load(ordering: .sequentiallyConsistent)
                sync.sync("/dk-test-directory") { () throws(Never) in
                    let index = started.add(1, ordering: .sequentiallyConsistent).newValue
                    if index == 1 {
                        // Hold the first sync until every caller has called, then give them time to queue.
                        let deadline = Date(timeIntervalSinceNow: 10)
                        while calling.load(ordering: .sequentiallyConsistent) < callers && Date() < deadline { usleep(1_000) }
                        usleep(50_000)
                    }
                    _ = finishedThrough.max(index, ordering: .sequentiallyConsistent)
                }
                // Some sync that began after this call (index > before) has finished.
                if finishedThrough.load(ordering: .sequentiallyConsistent) <= before { violations.add(1, ordering: .relaxed) }
                group.leave()
            }.start()
        }
        #expect(group.wait(timeout: .now() + 30) == .success)
        #expect(violations.load(ordering: .relaxed) == 0)
        #expect(started.load(ordering: .relaxed) < callers, "\(started.load(ordering: .relaxed)) syncs for \(callers) callers")
    }

    @Test func aCallersOwnFailureIsThrownAndTheNextCallerSyncsAgain() {
        struct Refused: Error {}
        let sync = DirectorySync()
        let calls = Atomic<Int>(0)
        #expect(throws: Refused.self) {
            try sync.sync("/dk-test-failing") { () throws(Refused) in
                calls.add(1, ordering: .relaxed)
                throw Refused()
            }
        }
        sync.sync("/dk-test-failing") { () throws(Never) in calls.add(1, ordering: .relaxed) }
        #expect(calls.load(ordering: .relaxed) == 2)
    }
}
